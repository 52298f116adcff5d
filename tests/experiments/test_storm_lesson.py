"""The shipped storm lesson (``scenarios/storm_lesson.json``) tells the truth about the storm.

The scenario's steps are the lab's ordinary ones (a burst and four policy changes), so the
shipped-scenario tests run it like the others, in virtual time and on the worker: its one
burst checks that a session reaches the shared dependency. The storm itself is made by the
class's traffic and the instructor's trigger, which no scenario step expresses; this test
checks what the instructions promise about it, in virtual time on the same model code: the
scenario's starting policy and then each step's policy (the changes accumulate, as they do
on the lab page), for 30 clients at the 5 calls/s the instructions ask for, against the
default shared dependency (8 servers x 40 ms, 2000 ms queue), with an 8 s down trigger.
"""

from __future__ import annotations

import pytest

from labs.engine import merge_settings, parse_policy
from labs.experiments.metastable import MetastableParams, figures_for
from tests.engine.helpers import load_scenario

PARAMS = MetastableParams(clients=30, rate=5, arrivals="poisson", duration_s=60)


def _policies() -> list[tuple[str, dict]]:
    """(what changed, the policy in force) after each policy step, the start first."""
    script = load_scenario("storm_lesson")
    policy = script["policy"]
    out = [("naive", policy)]
    for step in script["steps"]:
        if "set_policy" in step:
            policy = merge_settings(policy, step["set_policy"])
            out.append((", ".join(step["set_policy"]), policy))
    return out


@pytest.fixture(scope="module")
def figures() -> list[tuple[str, dict]]:
    return [(name, figures_for(PARAMS, parse_policy(p))) for name, p in _policies()]


def test_the_lesson_changes_one_setting_at_a_time():
    names = [name for name, _ in _policies()]
    assert names == ["naive", "backoff_base_ms, backoff_cap_ms, jitter", "retry_budget",
                     "breaker", "deadline_ms"]  # fmt: skip


def test_naive_clients_keep_the_dependency_down_after_the_trigger(figures):
    naive = figures[0][1]
    end = PARAMS.trigger_at_s + PARAMS.trigger_s
    assert naive["recovery_s"] is None
    # goodput below 20 % of the baseline from the trigger's end to the end of the run
    assert naive["below_20_s"] == PARAMS.duration_s - end
    assert naive["peak_over_baseline"] > 4
    assert naive["retries_per_call"] > 2


def test_jitter_alone_spreads_the_retries_but_does_not_end_the_storm(figures):
    jitter = figures[1][1]
    assert jitter["recovery_s"] is None
    assert jitter["retries_per_call"] > 2


@pytest.mark.parametrize("index", [2, 3, 4])
def test_from_the_budget_on_the_dependency_recovers(figures, index):
    name, m = figures[index]
    assert m["recovery_s"] is not None and m["recovery_s"] <= 5, name
    assert m["retries_per_call"] < 0.05, name
    assert m["peak_over_baseline"] < 1.3, name


def test_the_instructions_quote_these_figures(figures):
    text = load_scenario("storm_lesson")["instructions"]
    assert "never recover within the 60 s run" in text
    assert f"from {figures[0][1]['retries_per_call']:.1f} to under 0.02" in text
    assert figures[2][1]["retries_per_call"] < 0.02
    assert figures[2][1]["recovery_s"] <= 1
