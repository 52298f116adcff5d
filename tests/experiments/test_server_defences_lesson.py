"""The shipped "The server defends itself" lesson (``scenarios/server_defences.json``) tells
the truth about its four servers.

Like Find the edge, its steps are one-call bursts carrying the questions; the load, the
server's defences and the trigger come from the instructor. This test checks what the
instructions promise, in virtual time on the live class's model code (``tipping_point``'s
``simulate`` with the same ``SharedConfig`` defences the instructor sets): the default
shared dependency, the lesson's naive policy, 60 % of the capacity (4 calls/s each for a
class of 30), an 8 s down trigger and the question's 20 s to come back, over seeds 0 to 5.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labs.experiments.tipping_point import stable_line_pct
from tests.experiments.test_find_the_edge_lesson import _recovery as edge_recovery

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "scenarios" / "server_defences.json"
SEEDS = range(6)
LOAD_PCT = 60  # 4 calls/s x 30 students against 200 attempts/s
#: Each step's server, as the instructions tell the instructor to set it.
SERVERS = {
    1: {},
    2: {"codel_target_ms": 100, "codel_interval_ms": 100},
    3: {"rate_per_s": 180, "rate_burst": 20},
    4: {"discipline": "lifo"},
}


@pytest.fixture(scope="module")
def lesson() -> dict:
    return json.loads(LESSON.read_text())


def _recovery(lesson: dict, defences: dict, seed: int) -> int | None:
    return edge_recovery(lesson, LOAD_PCT, seed, defences)


def test_the_load_is_the_one_that_locked_in_during_find_the_edge(lesson):
    edge = json.loads((ROOT / "scenarios" / "find_the_edge.json").read_text())
    assert lesson["policy"] == edge["policy"]
    assert stable_line_pct(lesson["policy"]["max_attempts"] - 1) < LOAD_PCT < 100
    assert "about 120 calls/s" in lesson["instructions"] and "50 calls/s" in lesson["instructions"]


def test_the_instructions_name_each_step_s_settings_as_the_dashboard_labels_them(lesson):
    text = lesson["instructions"]
    assert "CoDel target wait 100 ms, CoDel interval 100 ms" in text
    assert "rate limit 180 attempts/s, burst 20" in text
    assert "queue order *newest first (LIFO)*" in text
    forms = ROOT / "labs" / "forms"  # the dashboard's labels, and its options' words
    labels = (forms / "shared.py").read_text() + (ROOT / "labs/presenters/server.py").read_text()
    for label in ("CoDel target wait (ms)", "CoDel interval (ms)", "Rate limit (attempts/s)",
                  "Rate limit's burst (attempts)", "Queue order", "newest first (LIFO)"):  # fmt: skip
        assert label in labels
    assert re.search(r"\*The server's defences\* \(a blank field is off\)", text)


def test_the_passive_server_never_comes_back(lesson):
    assert [_recovery(lesson, SERVERS[1], seed) for seed in SEEDS] == [None] * len(SEEDS)


@pytest.mark.parametrize("step", [2, 3, 4])
def test_a_defended_server_comes_back_within_a_second_at_every_seed(lesson, step):
    assert [_recovery(lesson, SERVERS[step], seed) for seed in SEEDS] == [0] * len(SEEDS)
