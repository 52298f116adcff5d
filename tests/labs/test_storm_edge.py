"""The edge on the storm panel: the stable line C / (1 + r) for the class's largest retry
count r among the sessions on the shared dependency, and the region the class's load (calls
asked per second, first attempts only) is in: stable below the line, vulnerable from it up to
the capacity, over capacity above. Edges: no retries (the line is the capacity), no session
on the shared dependency, no capacity, no traffic; and the headline carries the same figures
the chart draws."""

from __future__ import annotations

import pytest

from labs.presenters.storm import (
    HEADLINE_SECONDS,
    RUN_GAP_S,
    class_retries,
    load_region,
    stable_line,
    storm_edge,
    storm_headline,
)
from labs.selectors.storm import storm_sessions


def second(sec: int, calls: int = 0, retries: int = 0) -> dict:
    return {
        "second": sec, "offered": calls + retries, "calls": calls, "retries": retries,
        "calls_ok": calls, "ok": calls,
    }  # fmt: skip


def steady(first: int, last: int, calls: int) -> list[dict]:
    return [second(s, calls) for s in range(first, last + 1)]


def session(max_attempts: int | None, mode: str = "shared") -> dict:
    return {"session": 1, "student": "s", "scenario": "", "mode": mode, "max_attempts": max_attempts}


def test_the_stable_line_is_the_capacity_over_one_plus_the_retries():
    assert stable_line(200, 3) == 50
    assert stable_line(200, 1) == 100
    assert stable_line(150, 4) == 30


def test_with_no_retries_the_stable_line_is_the_capacity():
    assert stable_line(200, 0) == 200
    assert load_region(199.9, 200, 0) == "stable"
    assert load_region(200, 200, 0) == "vulnerable"  # the band is only the capacity itself
    assert load_region(200.1, 200, 0) == "over_capacity"


def test_the_regions_and_their_edges():
    # capacity 200, 3 retries: stable below 50, vulnerable from 50 up to 200, over above it
    assert load_region(0, 200, 3) == "stable"
    assert load_region(49.9, 200, 3) == "stable"
    assert load_region(50, 200, 3) == "vulnerable"
    assert load_region(155, 200, 3) == "vulnerable"
    assert load_region(200, 200, 3) == "vulnerable"
    assert load_region(201, 200, 3) == "over_capacity"


def test_no_session_on_the_shared_dependency_draws_no_line_and_places_no_load():
    assert class_retries([]) is None
    assert class_retries([session(4, mode="healthy"), session(2, mode="down")]) is None
    assert stable_line(200, None) is None
    assert load_region(100, 200, None) is None


@pytest.mark.parametrize("capacity", [0, None, -5])
def test_without_a_capacity_there_is_no_line_and_no_region(capacity):
    assert stable_line(capacity, 3) is None
    assert load_region(10, capacity, 3) is None
    edge = storm_edge(steady(100, 120, 10), 121, capacity, 3)
    assert edge["stable_per_s"] is None and edge["region"] is None
    assert edge["load_per_s"] == 10  # the load is still measured


def test_the_class_s_retries_are_the_largest_among_the_shared_sessions_only():
    sessions = [session(2), session(4), session(5, mode="healthy"), session(1)]
    assert class_retries(sessions) == 3  # 4 attempts: 3 retries; the private session's 5 left out
    assert class_retries([session(1)]) == 0


def test_the_load_is_the_calls_asked_over_the_headline_s_complete_seconds():
    rows = [*steady(100, 130, 40), second(131, 40, 120)]  # 131 is under way: not counted
    edge = storm_edge(rows, 131, 200, 3)
    assert edge == {
        "capacity_per_s": 200, "retries": 3, "stable_per_s": 50, "load_per_s": 40,
        "region": "stable",
    }  # fmt: skip
    # Retries are what the line allows for: a storm's attempts do not move the load.
    storm = steady(100, 120, 40) + [second(s, 40, 300) for s in range(121, 131)]
    assert storm_edge(storm, 131, 200, 3)["region"] == "stable"
    # The mean over the last HEADLINE_SECONDS seconds: 40, 40, 100 -> 60 (vulnerable).
    rising = [*steady(100, 129, 40), second(130, 100)]
    edge = storm_edge(rising, 131, 200, 3)
    assert edge["load_per_s"] == pytest.approx((40 * (HEADLINE_SECONDS - 1) + 100) / HEADLINE_SECONDS)
    assert edge["region"] == "vulnerable"
    assert storm_edge(steady(100, 130, 250), 131, 200, 3)["region"] == "over_capacity"


def test_with_no_traffic_there_is_a_line_but_no_load_to_place():
    quiet = steady(100, 120, 40) + [second(s) for s in range(121, 121 + RUN_GAP_S)]
    edge = storm_edge(quiet, 121 + RUN_GAP_S, 200, 3)
    assert edge["stable_per_s"] == 50 and edge["load_per_s"] is None and edge["region"] is None
    assert storm_edge([], 500, 200, 3)["region"] is None


def test_the_headline_carries_the_edge_in_every_state():
    rows = steady(100, 130, 60)
    h = storm_headline(rows, None, 131, capacity_per_s=200, retries=3)
    assert h["state"] == "healthy" and h["edge"]["region"] == "vulnerable"
    assert h["edge"]["stable_per_s"] == 50
    quiet = storm_headline([], None, 131, capacity_per_s=200, retries=1)
    assert quiet["state"] == "no_traffic" and quiet["edge"]["stable_per_s"] == 100
    # Called as before (no capacity, no retries): an edge with nothing to draw.
    assert storm_headline(rows, None, 131)["edge"]["stable_per_s"] is None


@pytest.mark.django_db
def test_the_panel_s_sessions_carry_their_attempts_per_call(classroom, factory, scenario):
    shared = {"mode": "shared"}
    factory.session(factory.student("ann", classroom), classroom, scenario, dependency=shared,
                    policy={"max_attempts": 2})  # fmt: skip
    factory.session(factory.student("bea", classroom), classroom, scenario, dependency=shared,
                    policy={"max_attempts": 5})  # fmt: skip
    factory.session(factory.student("cy", classroom), classroom, scenario,
                    dependency={"mode": "healthy"}, policy={"max_attempts": 5})  # fmt: skip
    # A policy saved without the field: the engine's default (4 attempts) is what runs.
    factory.session(factory.student("dee", classroom), classroom, scenario, dependency=shared,
                    policy={})  # fmt: skip
    rows = storm_sessions(classroom.pk)
    assert [(r["student"], r["max_attempts"]) for r in rows] == [
        ("ann", 2), ("bea", 5), ("cy", 5), ("dee", 4),
    ]  # fmt: skip
    assert class_retries(rows) == 4  # bea's 5 attempts; cy's session is not on it
