"""labs.engine.replay: a recorded start state replays the burst in virtual time, with the
same policy or another; ``compare`` on the command line."""

from __future__ import annotations

import json
import random

import pytest

from labs.engine import (
    Breaker,
    EventList,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    VirtualClock,
    parse_dependency,
    parse_policy,
)
from labs.engine.replay import capture_start, compare, diff_rows, parse_start, replay
from labs.engine.validate import ValidationError

from .helpers import SCENARIOS
from .test_cli import run_cli

DEPENDENCY = parse_dependency({"mode": "flaky", "fail_count": 20, "latency_ms": 5}).to_dict()
POLICY = parse_policy(
    {"max_attempts": 4, "jitter": "full", "breaker": {"failure_threshold": 3}}
).to_dict()


def live_burst(store, clock, seed, size, burst, first_call, policy=POLICY):
    """A burst run the way a worker runs one (its start state captured first)."""
    start = capture_start(
        dependency=DEPENDENCY,
        policy=policy,
        store_state=store.export_state(),
        now_us=int(clock.now() * 1e6 + 0.5),
        rng_seed=seed,
        size=size,
        concurrency=1,
        first_call=first_call,
        burst=burst,
    )
    rng = random.Random(seed)
    events = EventList()
    parsed = parse_policy(policy)
    dependency = FakeDependency(parse_dependency(DEPENDENCY), store=store, clock=clock, rng=rng)
    breaker = Breaker(parsed.breaker, store=store, clock=clock, rng=rng, sink=events)
    client = GuardedClient(
        parsed, breaker=breaker, dependency=dependency, clock=clock, rng=rng, sink=events,
        store=store,
    )  # fmt: skip
    result = client.run_burst(size, first_call=first_call, burst=burst)
    transitions = [(e.state_from, e.state_to, e.call) for e in events if e.kind == "transition"]
    return start, result, transitions


def test_a_replay_with_the_recorded_policy_is_the_burst_again():
    store, clock = MemoryStore(), VirtualClock(1_700_000_000.0)
    first, r1, t1 = live_burst(store, clock, "7:1", 3, 1, 1)
    clock.sleep(0.4)
    second, r2, t2 = live_burst(store, clock, "7:2", 6, 2, 4)
    for start, result, transitions in ((first, r1, t1), (second, r2, t2)):
        again = replay(json.loads(json.dumps(start)))  # it survives a JSON field
        assert [c["attempts"] for c in again.output["calls"]] == result.attempts
        assert [c["outcome"] for c in again.output["calls"]] == [c.outcome for c in result.calls]
        assert [(t["from"], t["to"], t["call"]) for t in again.output["transitions"]] == (
            transitions
        )
        assert again.fidelity["exact"] is True
    # The second burst starts from the first's leftovers: an open breaker, so it fast-fails.
    assert parse_start(second).breaker()["state"] == "open"
    assert r2.fast_failed == 6


def test_another_policy_changes_the_replay_and_not_the_start():
    store, clock = MemoryStore(), VirtualClock(0.0)
    start, result, _ = live_burst(store, clock, "1:1", 6, 1, 1)
    before = json.dumps(start, sort_keys=True)
    same, other = compare(start, None, dict(POLICY, max_attempts=1))
    assert json.dumps(start, sort_keys=True) == before
    assert same.metrics()["attempts"] == result.attempts_total
    assert other.metrics()["attempts"] < same.metrics()["attempts"]
    assert other.policy["max_attempts"] == 1
    rows = {r["key"]: r for r in diff_rows(same.metrics(), other.metrics())}
    assert rows["attempts"]["delta"] == other.metrics()["attempts"] - same.metrics()["attempts"]
    assert [r["label"] for r in rows.values()] == [
        "succeeded",
        "failed",
        "fast-failed",
        "attempts",
        "dependency hits",
        "time waiting",
        "total time",
    ]
    assert all(e.explain for e in other.events)


def test_a_policy_out_of_range_runs_nothing():
    start, _, _ = live_burst(MemoryStore(), VirtualClock(0.0), "1:1", 2, 1, 1)
    with pytest.raises(ValidationError) as info:
        replay(start, policy=dict(POLICY, max_attempts=9))
    assert "policy.max_attempts: must be between 1 and 5 (got 9)" in str(info.value)


@pytest.mark.parametrize(
    "doc, message",
    [
        ({}, "not a burst start state"),
        ({"version": 1, "dependency": {}, "policy": []}, "policy must be an object"),
    ],
)
def test_a_malformed_start_state_is_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        parse_start(doc)


def test_timed_modes_and_several_callers_say_why_a_replay_may_differ():
    start, _, _ = live_burst(MemoryStore(), VirtualClock(0.0), "1:1", 2, 1, 1)
    outage = dict(start, dependency={"mode": "outage", "down_for_ms": 1000}, concurrency=3)
    view = parse_start(outage)
    from labs.engine.replay import fidelity

    said = fidelity(view)
    assert said["exact"] is False
    assert any("outage" in r for r in said["reasons"])
    assert any("3 callers" in r for r in said["reasons"])


def test_a_burst_on_the_class_shared_dependency_is_not_called_exact():
    """The shared model's queue is filled by the whole class: a replay of one session cannot
    have it, so fidelity must not promise the same attempts (the healthy one is exact)."""
    from labs.engine.replay import fidelity

    start, _, _ = live_burst(MemoryStore(), VirtualClock(0.0), "1:1", 2, 1, 1)
    assert fidelity(parse_start(dict(start, dependency={"mode": "healthy"})))["exact"] is True
    said = fidelity(parse_start(dict(start, dependency={"mode": "shared"})))
    assert said["exact"] is False
    assert any("shared dependency" in r and "whole class" in r for r in said["reasons"])


def test_compare_on_the_command_line(tmp_path):
    policy_b = tmp_path / "b.json"
    policy_b.write_text(json.dumps({"breaker": {"failure_threshold": 1}}))
    done = run_cli("compare", SCENARIOS / "tour.json", "--policy-b", policy_b)
    assert done.returncode == 0, done.stderr
    assert "attempts                  22          14          -8" in done.stdout
    done = run_cli("compare", SCENARIOS / "tour.json", "--policy-b", policy_b, "--json")
    out = json.loads(done.stdout)
    rows = {r["key"]: r for r in out["diff"]}
    assert (rows["attempts"]["a"], rows["attempts"]["b"]) == (22, 14)
    assert [b["attempts"] for b in out["b"]["bursts"]][1] == [4, 0, 0, 0, 0, 0]


def test_compare_refuses_a_bad_policy_b_and_runs_nothing(tmp_path):
    policy_b = tmp_path / "b.json"
    policy_b.write_text(json.dumps({"max_attempts": 9}))
    done = run_cli("compare", SCENARIOS / "tour.json", "--policy-b", policy_b)
    assert done.returncode == 2
    assert "policy_b.max_attempts: must be between 1 and 5 (got 9)" in done.stderr
    assert done.stdout == ""
    policy_b.write_text("{nope")
    done = run_cli("compare", SCENARIOS / "tour.json", "--policy-b", policy_b)
    assert done.returncode == 2 and "malformed JSON at line 1" in done.stderr
