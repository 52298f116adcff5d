"""The burst summary's counts for the bulkhead lesson (``scenarios/bulkhead.json``): the
time waiting is backoff and waits for a pool slot together, so it never reads less than the
slot wait beside it; a call the bulkhead refuses at once failed fast. The engine's burst
result, the counts a running burst adds up from its rows, and the panel all say the same."""

from __future__ import annotations

import re

import pytest
from django.template.defaultfilters import floatformat

from labs.engine.scenario import run_scenario
from labs.presenters.lab_page import counts_from_events, summary_panel
from tests.engine.helpers import load_scenario
from tests.labs.panels import render_summary

FACTS = {"id": 9, "number": 1, "size": 20, "concurrency": 4, "error": "", "recorded": True}


@pytest.fixture(scope="module")
def bulkhead():
    return run_scenario(load_scenario("bulkhead"), include_events=True)


def stat(html: str, name: str) -> str:
    found = re.search(rf'data-stat="{name}">([^<]*)<', html)
    assert found, f"no {name} in the panel"
    return found.group(1)


def test_the_engine_counts_bulkhead_refusals_as_failed_fast(bulkhead):
    without, with_bulkhead = bulkhead["bursts"]
    assert (without["failed"], without["fast_failed"], without["pool_timeout"]) == (12, 0, 12)
    assert (with_bulkhead["rejected_bulkhead"], with_bulkhead["fast_failed"]) == (8, 8)
    assert with_bulkhead["failed"] == 0


@pytest.mark.parametrize("index", [0, 1])
def test_time_waiting_is_the_backoff_and_the_slot_waits_together(bulkhead, index):
    summary = bulkhead["bursts"][index]
    panel = summary_panel(FACTS, summary, status="done")
    waited = summary["wait_ms_total"]
    assert waited > 0 and summary["backoff_ms_total"] == 0
    assert panel["waiting_ms_total"] == waited
    html = render_summary(panel)
    assert stat(html, "waiting_ms_total") == floatformat(waited, 0)  # not 0 ms
    assert stat(html, "wait_ms_total") == floatformat(waited, 0)
    assert stat(html, "backoff_ms_total") == "0"
    assert stat(html, "fast_failed") == str(summary["fast_failed"])
    assert stat(html, "failed") == str(summary["failed"])


@pytest.mark.parametrize("index", [0, 1])
def test_a_running_bursts_counts_from_its_rows_agree_with_the_finished_summary(bulkhead, index):
    """What the page adds up from the rows as they arrive (labs.journal.rows.summary_delta) is
    what the burst's summary says once it ends."""
    summary = bulkhead["bursts"][index]
    rows = [e for e in bulkhead["events"] if e.get("burst") == summary["burst"]]
    counts = counts_from_events(rows)
    for name in ("calls", "succeeded", "failed", "fast_failed", "attempts_total"):
        assert counts[name] == summary[name], name
    running = summary_panel(FACTS, counts, status="running")
    done = summary_panel(FACTS, summary, status="done")
    assert running["waiting_ms_total"] == pytest.approx(done["waiting_ms_total"])


def test_a_burst_without_a_pool_waits_only_for_its_backoff():
    tour = run_scenario(load_scenario("tour"), include_events=True)
    first = tour["bursts"][0]
    panel = summary_panel(FACTS, first, status="done")
    assert panel["waiting_ms_total"] == first["backoff_ms_total"] == 175
    html = render_summary(panel)
    assert stat(html, "waiting_ms_total") == "175"
    assert "pool slot" not in html
