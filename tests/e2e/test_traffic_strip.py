"""The lab page's traffic strip chart in real Chromium: steady traffic run by a real worker
while the page is open, pushed to the page a second at a time (labs.journal.seconds); the
chart's per-second counts (attempts by outcome, calls by result) equal the journal's, its bars
are drawn, the journal shows a line a second whose rows come when it is opened, and nothing
breaks the page's strict CSP."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from labs.engine.events import FAST_FAIL_OUTCOMES
from labs.journal import kinds, seconds
from labs.journal import rows as journal_rows
from labs.models import JournalEvent, Traffic
from labs.services import lab
from labs.services.traffic import traffic_start
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import login
from tests.integration.conftest import wait_run_ended

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def journal_counts(session) -> dict[str, dict]:
    """Per second (of the event's engine time): attempts by outcome, calls by result, as the
    strip chart counts them."""
    out: dict[str, dict] = defaultdict(lambda: {"attempts": {}, "calls": {}})
    for row in JournalEvent.objects.filter(session=session, kind__in=("attempt", "call_result")):
        second = str(int(row.t_ms // 1000))
        if row.kind == "attempt":
            kind = (row.data or {}).get("outcome") or (
                "ok" if row.outcome == "ok" else "timeout" if row.error == "timeout" else "error"
            )
            counts = out[second]["attempts"]
        else:
            kind = kinds.call_count(row.outcome)
            counts = out[second]["calls"]
        counts[kind] = counts.get(kind, 0) + 1
    return dict(out)


def traffic_page(browser, daphne_server, name: str, code: str, username: str, viewport):
    """A student's lab page on a dependency failing 30 % of its 5 ms calls, open and live:
    the session, the student, the browser context, the page and the errors it logs."""
    scenario = make_scenario(name, title=name.title())
    room = make_classroom(f"{name.title()} class", join_code=code)
    room.scenarios.add(scenario)
    student = make_student(username, room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    lab.session_set_dependency(
        session=session, user=student, changes={"mode": "error_rate", "rate": 0.3, "latency_ms": 5}
    )
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    login(page, daphne_server, username, DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    page.wait_for_selector('#live-status[data-state="live"]')
    return session, student, context, page, errors


def run_traffic_to_its_end(page, session, student, rate: int, duration_s: int) -> None:
    """Steady traffic (evenly spaced) on a real worker, to its end, and the page caught up
    with the journal's last row."""
    traffic = traffic_start(
        session=session, user=student, rate=rate, duration_s=duration_s, arrivals="even"
    )
    wait_run_ended(traffic, 60)
    assert traffic.status == Traffic.Status.DONE, traffic.error
    last = JournalEvent.objects.filter(session=session).order_by("-seq").first().seq
    page.wait_for_function("n => failureLab.lastSeq() === n", arg=last, timeout=30_000)


def test_the_strip_chart_counts_the_traffic_as_the_journal_does(browser, daphne_server, e2e_worker):
    session, carol, context, page, errors = traffic_page(
        browser, daphne_server, "strip", "STRIP001", "carol", (1440, 1500)
    )
    try:
        expect(page.locator("#traffic-strip-desc")).to_have_text("No call yet.")
        run_traffic_to_its_end(page, session, carol, rate=5, duration_s=3)
        expected = journal_counts(session)
        assert sum(len(c["calls"]) for c in expected.values()) > 0
        assert page.evaluate("failureLab.stripCounts()") == expected
        # Drawn on uPlot: a canvas a row, every attempt and call of the minute in its bars.
        expect(page.locator("#traffic-strip .strip-attempts canvas")).to_be_visible()
        expect(page.locator("#traffic-strip .strip-calls canvas")).to_be_visible()
        drawn = page.evaluate("failureLab.stripDrawn()")
        attempts = sum(n for c in expected.values() for n in c["attempts"].values())
        calls = sum(n for c in expected.values() for n in c["calls"].values())
        assert (drawn["attempts"], drawn["calls"]) == (attempts, calls)
        assert drawn["labels"] == ["breaker", "attempts", "calls"]
        expect(page.locator("#traffic-strip-desc")).to_contain_text("15 calls")
        # The journal: the traffic as one line a second, none of its rows on its own.
        lines = page.locator("#journal-rows > li.journal-second")
        expect(lines).to_have_count(len(expected))
        assert page.locator("#journal-rows > li.journal-row[data-kind=attempt]").count() == 0
        kinds_shown = page.eval_on_selector_all(
            "#journal-rows > li.journal-row", "rows => rows.map(r => r.dataset.kind)"
        )
        assert kinds_shown[:2] == ["traffic_end", "traffic_start"]
        assert not errors, errors
    finally:
        context.close()


def test_a_second_of_traffic_shows_the_journals_counts_and_opens_to_its_rows(
    browser, daphne_server, e2e_worker
):
    """At 1920x1080: the strip's line for the last full second says what the journal's rows
    of that second count, and the journal's line of a second, opened, lists every row of it
    in the journal's words."""
    session, gina, context, page, errors = traffic_page(
        browser, daphne_server, "second", "SECOND01", "gina", (1920, 1080)
    )
    try:
        run_traffic_to_its_end(page, session, gina, rate=8, duration_s=4)
        traffic_rows = [
            row
            for row in JournalEvent.objects.filter(session=session).order_by("seq")
            if kinds.per_second(row.kind, row.burst_id)
        ]
        counted = seconds.count((row.seq, row) for row in traffic_rows)
        newest = max(counted)
        # The strip's line: the last full second, in the journal's counts.
        latest = page.locator("#strip-latest")
        expect(latest).to_have_attribute("data-second", str(newest))
        expected_text = journal_rows.second_text(counted[newest])
        clock = journal_rows.clock_text(datetime.fromtimestamp(newest, tz=UTC))[:8]
        expect(latest).to_have_text(f"Last full second of traffic ({clock}): {expected_text}")
        assert f"{counted[newest]['counts']['calls']} call" in expected_text
        # Every second's line says its counts; the busiest one, opened, lists its rows.
        for t, second in counted.items():
            expect(page.locator(f"#sec-{t} .j-msg")).to_have_text(journal_rows.second_text(second))
        busiest = max(counted, key=lambda t: counted[t]["n"])
        line = page.locator(f"#sec-{busiest}")
        line.locator("summary").click()
        opened = line.locator(".second-rows li.journal-row")
        expect(opened).to_have_count(counted[busiest]["n"])
        mine = [r for r in traffic_rows if int(r.t_ms // 1000) == busiest]
        assert opened.evaluate_all("rows => rows.map(r => Number(r.dataset.seq))") == [
            r.seq for r in mine
        ]
        assert opened.locator(".j-msg").all_inner_texts() == [r.message for r in mine]
        assert opened.locator(".j-kind").all_inner_texts() == [kinds.label(r.kind) for r in mine]
        assert page.evaluate("document.documentElement.scrollWidth") <= 1920
        assert not errors, errors
    finally:
        context.close()


def test_the_page_counts_every_kind_of_row_as_the_server_does(browser, daphne_server):
    """The page's script reads its count rules from the registry: for every kind and every
    kind of call outcome, what a row adds to the counts is what labs.journal.kinds says."""
    scenario = make_scenario("counts", title="Counts")
    room = make_classroom("Counts class", join_code="COUNTS01")
    room.scenarios.add(scenario)
    dana = make_student("dana", room)
    session = lab.session_open(user=dana, classroom=room, scenario=scenario)
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, daphne_server, "dana", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        outcomes = ["success", "degraded", "failure", "ok", "error", "", *FAST_FAIL_OUTCOMES]
        cases = [[kind, outcome] for kind in kinds.KINDS for outcome in outcomes]
        on_page = page.evaluate(
            "cases => cases.map(([k, o]) => failureLab.countDelta(k, o))", cases
        )
        assert on_page == [kinds.delta(kind, outcome) for kind, outcome in cases]
        assert {"calls": 1, "degraded": 1} in on_page  # a fallback's answer is its own count
    finally:
        context.close()
