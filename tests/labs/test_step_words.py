"""Words for people: a step's sentence, generated from its changes, uses the lab page's labels
and values as a person reads them, never the JSON names; shipped lessons cite no source file;
an over-long value is refused naming the field in words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from labs.presenters.lessons import step_sentence
from labs.services import lab
from tests.conftest import flush_test_redis

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.json"))
#: What a code name looks like in a sentence: snake_case, a Python constant, a dotted path.
CODE = re.compile(r"\b[a-z]+_[a-z_]+\b|\bTrue\b|\bFalse\b|\bNone\b|\b\w+\.\w+_\w+")


@pytest.mark.parametrize(
    ("step", "sentence"),
    [
        (
            {"set_policy": {"idempotency_keys": True}},
            "Change the policy. Idempotency keys: on.",
        ),
        (
            {"set_policy": {"retry_budget": {"token_ratio": 0.1, "max_tokens": 1}}},
            "Change the policy. Retry budget: retries up to 10 % of calls; "
            "Retry budget: at most 1 retry saved.",
        ),
        ({"set_policy": {"retry_budget": None}}, "Change the policy. Retry budget: off."),
        (
            {"set_policy": {"backoff_base_ms": 400, "backoff_cap_ms": 1000, "jitter": "full"}},
            "Change the policy. Backoff base: 400 ms; Backoff cap: 1 s; Jitter: full.",
        ),
        (
            {"set_policy": {"breaker": {"kind": "rolling_ratio", "failure_ratio": 0.5}}},
            "Change the policy. Breaker kind: rolling ratio; Rolling: failure ratio: 50 %.",
        ),
        ({"set_policy": {"breaker_scope": "host"}}, "Change the policy. One breaker per: host."),
        ({"set_policy": {"deadline_ms": None}}, "Change the policy. Per-call deadline: off."),
        (
            {"set_dependency": {"retry_after_ms": 1500}},
            "Change the dependency. Rate limited: 429s for 1.5 s.",
        ),
        (
            {"set_dependency": {"mode": "script", "outcomes": ["ok", "ok", "fail"]}},
            "Set the dependency to script: ok 2 times, fail, then healthy.",
        ),
        (
            {"set_dependency": {"mode": "error_rate", "rate": 0.25}},
            "Set the dependency to error rate: 25 % of attempts fail.",
        ),
        ({"set_dependency": {"mode": "rate_limited"}}, "Set the dependency to rate limited."),
        ({"wait_ms": 3500}, "Wait 3.5 s (start the timer; run the next step once it has run out)."),
        ({"burst": 6, "concurrency": 4}, "Run a burst of 6 calls with 4 concurrent callers."),
    ],
)
def test_a_step_reads_in_the_lab_pages_words(step, sentence):
    assert step_sentence(step) == sentence


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_no_shipped_step_sentence_shows_a_code_name(path):
    for step in json.loads(path.read_text())["steps"]:
        sentence = step_sentence(step)
        assert not CODE.search(sentence), sentence


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_no_shipped_lesson_cites_a_file_or_a_code_name(path):
    script = json.loads(path.read_text())
    text = " ".join(
        [script.get("instructions", ""), script.get("description", "")]
        + [
            str((step.get(part) or {}).get(key, ""))
            for step in script["steps"]
            for part, key in (("ask", "question"), ("ask", "explanation"), ("situation", "missed"))
        ]
    )
    assert not re.search(r"tests/|labs/|\.py\b|docs/", text)
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", text), re.findall(r"\b[a-z]+_[a-z_]+\b", text)


@pytest.mark.django_db
def test_an_over_long_mode_is_refused_naming_the_field_in_words(
    client, student, classroom, scenario
):
    flush_test_redis()
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    client.force_login(student)
    before = dict(session.dependency)
    response = client.post(
        reverse("labs:session_dependency", args=[session.pk]),
        {"mode": "x" * 150},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 422
    assert "Dependency mode: at most 100 characters (got 150)" in body
    assert "None:" not in body
    session.refresh_from_db()
    assert session.dependency == before
