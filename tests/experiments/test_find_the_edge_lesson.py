"""The shipped "Find the edge" lesson (``scenarios/find_the_edge.json``) tells the truth about
the edge.

Its steps are one-call bursts carrying the questions; the loads and the trigger come from the
instructor's storm panel, which no scenario step expresses. This test checks what the
instructions promise, in virtual time on the live class's model code (the ``tipping_point``
experiment's runs): for the default shared dependency (8 servers x 40 ms, 2000 ms queue) and
the lesson's naive policy (3 retries at once, a 500 ms timeout), an 8 s down trigger at each
step's load, and the question's 20 s to come back, over seeds 0 to 5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labs.experiments.tipping_point import TippingParams, simulate, stable_line_pct

LESSON = Path(__file__).resolve().parents[2] / "scenarios" / "find_the_edge.json"

SEEDS = range(6)
#: Each step's load in % of the capacity, as the instructions give it for a class of 30:
#: 1, 2 and 4 calls/s each against 200 attempts/s.
LOADS = {1: 15, 2: 30, 3: 60}


@pytest.fixture(scope="module")
def lesson() -> dict:
    return json.loads(LESSON.read_text())


def _recovery(lesson: dict, load: int, seed: int, defences: dict | None = None) -> int | None:
    """Seconds from the trigger's end until the dependency is back, None past the question's
    window: the lesson's policy at ``load`` % of the default dependency's capacity, an 8 s
    down trigger, the server's ``defences`` (none: passive)."""
    policy = lesson["policy"]
    within = lesson["steps"][0]["ask"]["within_s"]
    params = TippingParams(
        retries=policy["max_attempts"] - 1, timeout_ms=policy["attempt_timeout_ms"],
        servers=8, service_ms=40, max_queue_ms=2000, observe_s=within + 5, seed=seed,
    )  # fmt: skip
    back = simulate(params, load, "down", 8, defences=defences)["recovery_s"]
    return back if back is not None and back <= within else None


def test_the_loads_are_below_at_and_above_the_stable_line(lesson):
    line = stable_line_pct(lesson["policy"]["max_attempts"] - 1)
    assert line == 25
    assert LOADS[1] < line < LOADS[2] < LOADS[3] < 100
    text = lesson["instructions"]
    for calls in ("about 30 calls/s", "about 60 calls/s", "about 120 calls/s", "50 calls/s"):
        assert calls in text


def test_step_1_comes_back_within_a_second_at_every_seed(lesson):
    assert [_recovery(lesson, LOADS[1], seed) for seed in SEEDS] == [0] * len(SEEDS)


def test_step_3_never_comes_back_within_the_question_s_seconds(lesson):
    assert [_recovery(lesson, LOADS[3], seed) for seed in SEEDS] == [None] * len(SEEDS)


def test_step_2_sits_at_the_edge_it_comes_back_at_some_seeds_only(lesson):
    outcomes = [_recovery(lesson, LOADS[2], seed) is not None for seed in SEEDS]
    assert any(outcomes) and not all(outcomes), outcomes
