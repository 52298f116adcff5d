"""The shared dependency's state as a student's lab page shows it (presenters.shared_status):
triggered while a trigger runs; overloaded when the last complete second shed, timed out or
had a queue wait p99 at the threshold; healthy otherwise."""

from __future__ import annotations

from labs.engine.shared import Second
from labs.presenters.storm import OVERLOAD_WAIT_MS, shared_status

NOW_US = 1_000_000_000 * 1_000_000 + 400_000  # 0.4 s into second 1e9
LAST = 1_000_000_000 - 1


def second(**counts) -> dict:
    return {**Second(second=LAST).to_dict(), **counts}


def model(trigger=None) -> dict:
    return {"trigger": trigger, "capacity_per_s": 200}


def test_healthy_when_the_last_second_was_quiet():
    assert shared_status([second(offered=100, ok=100)], model(), NOW_US)["state"] == "healthy"
    assert shared_status([], model(), NOW_US)["state"] == "healthy"


def test_triggered_while_the_trigger_runs_and_only_then():
    running = {"kind": "down", "from_us": NOW_US - 1_000_000, "until_us": NOW_US + 7_000_000}
    status = shared_status([second(offered=100)], model(running), NOW_US)
    assert status == {"state": "triggered", "reason": "down trigger, 7 s left"}
    ended = {**running, "until_us": NOW_US - 1}
    assert shared_status([second(offered=100)], model(ended), NOW_US)["state"] == "healthy"


def test_overloaded_on_shed_timeouts_or_a_long_queue_wait():
    shed = shared_status([second(offered=90, shed=3, timeout=2)], model(), NOW_US)
    assert shed == {"state": "overloaded", "reason": "3 shed and 2 timed out in the last second"}
    waits = shared_status([second(offered=90, wait_p99_ms=OVERLOAD_WAIT_MS)], model(), NOW_US)
    assert waits == {"state": "overloaded", "reason": f"queue wait p99 {OVERLOAD_WAIT_MS} ms"}
    below = second(offered=90, wait_p99_ms=OVERLOAD_WAIT_MS - 50)
    assert shared_status([below], model(), NOW_US)["state"] == "healthy"


def test_only_the_last_complete_second_counts():
    older = {**second(shed=10), "second": LAST - 1}
    current = {**second(shed=10), "second": LAST + 1}
    assert shared_status([older, current], model(), NOW_US)["state"] == "healthy"
