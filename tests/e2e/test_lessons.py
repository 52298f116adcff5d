"""The four lessons beyond one dependency, in headless Chromium against daphne, a real Celery
worker and Redis: each session starts from its shipped scenario (scenarios/<name>.json), the
student changes settings through the page's forms and runs bursts with its button, and the page
shows the figure that makes the lesson's point. A screenshot each: artifacts/e2e/lesson-*.png.
"""

from __future__ import annotations

import json

import pytest

from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, ROOT, login, show_setting

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000


def _session(name: str, code: str):
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    scenario = make_scenario(name, title=script["title"], script=script)
    room = make_classroom(f"Lesson {name}", join_code=code)
    room.scenarios.add(scenario)
    student = make_student(f"s{code.lower()}", room)
    return student, lab.session_open(user=student, classroom=room, scenario=scenario)


@pytest.fixture
def open_page(browser, daphne_server, e2e_worker):
    contexts = []

    def opened(name: str, code: str):
        student, session = _session(name, code)
        context = browser.new_context(viewport={"width": 1440, "height": 1600})
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        login(page, daphne_server, student.username, DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        return page, errors

    yield opened
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"lesson-{name}.png"), full_page=True)


def run_burst(page, size: int, concurrency: int, number: int) -> None:
    page.fill("#id_size", str(size))
    page.fill("#id_concurrency", str(concurrency))
    page.click("#run-burst")
    page.wait_for_function(
        """n => { const s = document.getElementById('burst-summary');
                  return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
        arg=number,
        timeout=BURST_TIMEOUT_MS,
    )


def save_policy(page, **fields: str) -> None:
    for name, value in fields.items():
        selector = f"#id_{name}"
        show_setting(page, selector)
        if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)
    page.click("#save-policy")
    page.wait_for_function(
        "() => document.querySelector('#policy-form .form-message').textContent"
        ".includes('Policy saved')"
    )


def stat(page, name: str) -> str:
    return page.inner_text(f'#burst-summary [data-stat="{name}"]').strip()


def dependency_row(page, name: str) -> list[str]:
    return page.eval_on_selector_all(
        f'#burst-summary tr[data-dependency="{name}"] td', "cells => cells.map(c => c.textContent)"
    )


def test_per_host_breakers_isolate_the_host_that_is_down(open_page):
    page, errors = open_page("per_host_breakers", "HOSTS001")
    save_policy(page, breaker_scope="host")
    run_burst(page, 18, 1, 1)
    assert (stat(page, "succeeded"), stat(page, "failed"), stat(page, "fast_failed")) == (
        "18", "0", "0",
    )  # fmt: skip
    page.wait_for_selector('#breaker-badge li[data-part="h1"][data-state="open"]')
    parts = page.eval_on_selector_all(
        "#breaker-badge li[data-part]", "items => items.map(i => [i.dataset.part, i.dataset.state])"
    )
    assert parts == [["h0", "closed"], ["h1", "open"], ["h2", "closed"]]
    lanes = page.eval_on_selector_all(
        "#timeline-chart .tl-host-axis", "labels => labels.map(l => l.textContent)"
    )
    assert lanes == ["host 0", "host 1", "host 2"]
    assert page.locator("#timeline-chart .tl-host-band.tl-band-open").count() >= 1
    assert page.locator('.journal-row[data-kind="attempt"] .j-msg', has_text="host 1,").count() > 0
    shot(page, "per-host-breakers")
    assert errors == []


def test_a_bulkhead_keeps_a_healthy_while_b_is_slow(open_page):
    page, errors = open_page("bulkhead", "BULK0001")
    run_burst(page, 20, 4, 1)
    assert dependency_row(page, "a")[:2] == ["10", "4"]  # calls, succeeded
    assert stat(page, "pool_timeout") == "12"
    save_policy(page, bulkhead="2")
    run_burst(page, 20, 4, 2)
    assert dependency_row(page, "a")[:2] == ["10", "10"]
    assert stat(page, "rejected_bulkhead") == "8"
    assert page.locator(".journal-row .j-msg", has_text="(the bulkhead); not called").count() == 8
    shot(page, "bulkhead")
    assert errors == []


def test_a_cached_fallback_answers_while_the_dependency_is_down(open_page):
    page, errors = open_page("fallback_cached", "FALLBK01")
    run_burst(page, 4, 1, 1)
    show_setting(page, "#mode-down")
    page.click("#mode-down")
    page.wait_for_selector('#mode-down[aria-pressed="true"]')
    run_burst(page, 6, 1, 2)
    assert (stat(page, "degraded"), stat(page, "failed"), stat(page, "fast_failed")) == (
        "6", "0", "0",
    )  # fmt: skip
    degraded = page.locator('.journal-row.tone-degraded[data-kind="call_result"] .j-msg')
    assert degraded.count() == 6
    assert "answered by the cached answer" in degraded.first.inner_text()
    shot(page, "fallback-cached")
    assert errors == []


def test_idempotency_keys_charge_once_per_call(open_page):
    page, errors = open_page("idempotency_keys", "IDEMP001")
    run_burst(page, 6, 1, 1)
    assert page.inner_text('#burst-summary [data-stat="effects"]').split() == ["9", "/", "6"]
    save_policy(page, idempotency_keys="true")
    run_burst(page, 6, 1, 2)
    assert page.inner_text('#burst-summary [data-stat="effects"]').split() == ["6", "/", "6"]
    assert page.locator(".journal-row .j-msg", has_text="charge not applied again").count() == 3
    shot(page, "idempotency-keys")
    assert errors == []
