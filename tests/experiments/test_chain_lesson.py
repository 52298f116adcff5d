"""The shipped "A chain of students" lesson (``scenarios/chain_of_students.json``) tells the
truth about its two steps, in virtual time on the adapter the live chain uses
(``labs.engine.chain.NextTier``, through the ``amplification`` experiment): three tiers of
the lesson's policy in front of a down leaf, naive and then with a retry budget at every
tier. The same chain live, with a worker and the browser: tests/e2e/test_chain_lesson.py."""

from __future__ import annotations

import json
from pathlib import Path

from labs.engine import LIMITS
from labs.experiments.amplification import AmplificationParams, _simulate

ROOT = Path(__file__).resolve().parents[2]
LESSON = json.loads((ROOT / "scenarios" / "chain_of_students.json").read_text())
TIERS = 3


def leaf_hits(requests: int, *, tiers: int = TIERS, budget: bool = False) -> int:
    params = AmplificationParams(
        tiers=tiers,
        attempts=LESSON["policy"]["max_attempts"],
        requests=requests,
        budget_pct=LIMITS["policy.retry_budget.token_ratio"].default * 100,
        budget_tokens=LIMITS["policy.retry_budget.max_tokens"].default,
    )
    return int(_simulate(params, budget)["leaf_hits"])


def test_step_1_s_answer_is_three_to_the_tiers_behind_the_caller():
    step = LESSON["steps"][0]
    assert step["burst"] == 1 and step["ask"]["measure"] == "leaf_hits"
    # a call at tier k goes through the tiers k..3: 27 from the front, 9, 3 from the back
    assert [leaf_hits(1, tiers=depth) for depth in (3, 2, 1)] == [27, 9, 3]
    assert "3 x 3 x 3 = 27" in step["ask"]["explanation"]
    assert "from tier 2, 3 x 3 = 9; from the back, 3" in step["ask"]["explanation"]


def test_step_2_s_budgets_bring_540_down_to_58_and_the_tolerance_covers_a_class():
    step = LESSON["steps"][1]
    assert step["burst"] == 20 and step["ask"]["measure"] == "leaf_hits"
    naive, budgeted = leaf_hits(20), leaf_hits(20, budget=True)
    assert (naive, budgeted) == (540, 58)
    assert [leaf_hits(20, tiers=depth, budget=True) for depth in (2, 1)] == [44, 31]
    assert "540" in step["ask"]["question"] and "58 attempts" in step["ask"]["explanation"]
    assert "(44 from tier 2, 31 from the back)" in step["ask"]["explanation"]
    # A class shares the inner services' budgets: at least one attempt per call reaches the
    # leaf, at most one chain's worth. An answer in the middle is right at both ends.
    middle = (20 + budgeted) / 2
    assert abs(middle - 20) <= step["ask"]["tolerance"]
    assert abs(middle - budgeted) <= step["ask"]["tolerance"]


def test_the_instructions_say_the_figures_of_the_seed_and_the_settings_by_their_labels():
    text = LESSON["instructions"]
    assert "810 hits, 27 per request" in text and "it takes 71" in text
    assert "27, and 19 with the budgets" in text and leaf_hits(1, budget=True) == 19
    assert "20 requests, step 2's burst: 540, and 58 with the budgets" in text
    assert (leaf_hits(30), leaf_hits(30, budget=True)) == (810, 71)
    labels = (ROOT / "labs" / "forms" / "lab.py").read_text()
    for label in ("Retry budget: token ratio", "Retry budget: ceiling"):
        assert label in labels and label.split(": ")[1] in text
    assert LESSON["policy"]["retry_budget"] is None and LESSON["policy"]["max_attempts"] == 3


def test_no_tier_gives_up_on_the_one_behind_it_while_a_class_queues_at_the_dependency():
    """Step 1 in a class of 30, everyone pressing Do it at once, on the default shared
    dependency during the down trigger (each attempt served for its service time, then
    failed). A chain's attempts are one after another, so at most 30 attempts are at the
    dependency at a time: each waits at most ceil(30 / servers) service times. A front
    attempt is a tier-2 call of 3 tier-3 calls of 3 attempts each; the lesson's attempt timeout
    must outlast it, or the front gives up and the step's count comes out short."""
    import math

    from labs.engine.shared import SharedConfig

    shared = SharedConfig()
    in_flight = 30
    attempt_ms = (math.ceil(in_flight / shared.servers) + 1) * shared.service_ms
    front_attempt_ms = 9 * attempt_ms
    assert front_attempt_ms == 1800  # 9 attempts of (4 waits + 1 service) x 40 ms
    assert LESSON["policy"]["attempt_timeout_ms"] > front_attempt_ms * 2  # and room to spare
