"""The three-step tour (``scenarios/tour.json``), exactly, in virtual time."""

from __future__ import annotations

from labs.engine import run_scenario

from .helpers import load_scenario


def test_tour_gives_the_exact_figures_of_seed_000():
    out = run_scenario(load_scenario("tour"))
    b1, b2, b3 = out["bursts"]

    assert b1["succeeded"] == 6
    assert b1["attempts"] == [4, 1, 1, 1, 1, 1]
    assert b1["backoff_ms_total"] == 175

    assert b2["attempts"] == [4, 4, 4, 0, 0, 0]
    assert [c["outcome"] for c in out["calls"][6:12]] == ["failure"] * 3 + ["rejected_open"] * 3

    assert b3["call_numbers"] == [13]
    assert out["calls"][12]["attempts"] == 1
    assert out["calls"][12]["probe"] is True
    assert out["calls"][12]["outcome"] == "success"

    assert [(t["from"], t["to"], t["call"]) for t in out["transitions"]] == [
        ("closed", "open", 9),
        ("open", "half_open", 13),
        ("half_open", "closed", 13),
    ]


def test_tour_virtual_times_are_the_sum_of_configured_sleeps():
    out = run_scenario(load_scenario("tour"))
    # burst 1: 9 attempts x 5 ms + 175 ms backoff; burst 2: 12 x 5 + 3 x 175; wait 2000; probe 5.
    assert [b["wall_ms"] for b in out["bursts"]] == [220, 585, 5]
    assert out["total_ms"] == 2810
    assert out["transitions"][0]["at_ms"] == 805
    assert out["transitions"][1]["at_ms"] == 2805


def test_tour_explains_the_backoff_and_the_probe():
    out = run_scenario(load_scenario("tour"), include_events=True)
    explains = [e["explain"] for e in out["events"]]
    assert "attempt 2 failed (503); sleeping 50 ms = min(500, 25 x 2^1)" in explains
    assert "rejected: breaker OPEN for another 2.0 s; dependency not called" in explains
    assert "breaker HALF-OPEN -> CLOSED: probe call #13 succeeded" in explains


def test_same_seed_gives_the_same_events():
    first = run_scenario(load_scenario("tour"), include_events=True)
    second = run_scenario(load_scenario("tour"), include_events=True)
    assert first == second
