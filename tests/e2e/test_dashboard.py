"""The instructor's class dashboard in headless Chromium against daphne, a real Celery worker
and Redis.

The dashboard is open while two students run bursts: both rows change live (bursting, totals,
the breaker opening). The instructor puts the whole class into "down" from the dashboard:
every row flips, and the fault shows in each student's journal (live on a student's open lab
page). The instructor drills down into a student's lab page: read-only, and live. An
instructor of another class is refused, over HTTP and over the websocket. The sessions
table's headers wrap between words only, with the widest labels a row shows, at 1400 and
1920 px; on a phone the table is cards and nothing scrolls the page sideways.

Screenshots go to artifacts/e2e/dashboard-*.png.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from playwright.sync_api import expect

from labs.models import Burst, JournalEvent
from labs.presenters.text import MODE_LABELS
from labs.services import bursts, lab
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
    tour_script,
)
from tests.e2e.conftest import ARTIFACTS, login
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIVE_TIMEOUT_MS = 30_000


@pytest.fixture
def cohort(db):
    """Class A (teacher_a; alice and bob with a session each) and class B (teacher_b)."""
    scenario = make_scenario("tour", title="The tour", script=tour_script(
        dependency={"mode": "healthy", "latency_ms": 150}))  # fmt: skip
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    other = make_classroom("Resilience B", join_code="CLASSB02")
    other.scenarios.add(scenario)
    make_instructor("teacher_a", room)
    make_instructor("teacher_b", other)
    sessions = [
        lab.session_open(user=make_student(name, room), classroom=room, scenario=scenario)
        for name in ("alice", "bob")
    ]
    return room, sessions


def off_loop(fn, **kwargs):
    """Call a service from another thread: services push to the channel layer on commit
    (``async_to_sync``), which refuses to run beside Playwright's event loop in this thread."""

    def call():
        try:
            return fn(**kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def row_value(page, session_id: int, field: str) -> str:
    return page.inner_text(f'#row-{session_id} [data-field="{field}"]').strip()


def wait_row(page, session_id: int, js_condition: str, timeout: int = LIVE_TIMEOUT_MS) -> None:
    """Wait until ``js_condition`` holds for the row ``r`` of ``session_id``."""
    page.wait_for_function(
        f"id => {{ const r = document.getElementById('row-' + id); return !!r && ({js_condition}); }}",
        arg=session_id,
        timeout=timeout,
    )


def burst_done(burst: Burst) -> None:
    wait_for(
        lambda: Burst.objects.get(pk=burst.pk).status == "done", timeout=60, message="burst end"
    )


def test_instructor_watches_two_students_burst_live_and_downs_the_whole_class(
    browser, daphne_server, e2e_worker, cohort
):
    room, (alice, bob) = cohort
    # The worker's journal writer may start on first use: warm it up, so the bursts below are
    # journaled (and pushed) batch by batch while they run.
    burst_done(off_loop(bursts.burst_start, session=alice, user=alice.owner, size=1))

    teacher = browser.new_context(viewport={"width": 1400, "height": 1000})
    student = browser.new_context(viewport={"width": 1400, "height": 1200})
    other_student = browser.new_context()
    teacher.set_default_timeout(20_000)
    student.set_default_timeout(20_000)
    page = teacher.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
        page.click(f'a[href="/classes/{room.pk}/dashboard/"] >> nth=0')  # from the home page
        page.wait_for_selector('#live-status[data-state="live"]')
        assert page.inner_text('[data-count="total"]') == "2"
        assert page.inner_text('[data-count="closed"]') == "2"
        assert row_value(page, alice.pk, "calls") == "1"  # the warm-up burst

        # 1. Two students burst at once: bob's dependency is down, so his breaker opens.
        off_loop(
            lab.session_set_dependency,
            session=bob,
            user=bob.owner,
            changes={"mode": "down", "latency_ms": 100},
        )
        off_loop(
            lab.session_set_dependency,
            session=alice,
            user=alice.owner,
            changes={"latency_ms": 250},
        )
        wait_row(page, bob.pk, "r.dataset.mode === 'down'")
        runs = [
            off_loop(bursts.burst_start, session=alice, user=alice.owner, size=8),
            off_loop(bursts.burst_start, session=bob, user=bob.owner, size=6),
        ]
        # Both at once (each burst lasts about two seconds): seen live, not after the fact.
        page.wait_for_function(
            """ids => document.querySelector('[data-count=bursting]').textContent === '2'
                     && ids.every(id => document.getElementById('row-' + id)
                                          .dataset.activity === 'bursting')""",
            arg=[alice.pk, bob.pk],
            timeout=LIVE_TIMEOUT_MS,
        )
        wait_row(page, alice.pk, "Number(r.querySelector('[data-field=calls]').textContent) > 2")
        shot(page, "1-bursting")
        wait_row(page, bob.pk, "r.dataset.state === 'open'")
        assert page.inner_text('[data-count="open"]') == "1"
        for run in runs:
            burst_done(run)
        wait_row(page, alice.pk, "r.dataset.activity === 'idle'")
        wait_row(page, bob.pk, "r.dataset.activity === 'idle'")
        # The live totals are exactly the journal's.
        wait_row(page, alice.pk, "r.querySelector('[data-field=calls]').textContent === '9'")
        assert row_value(page, alice.pk, "attempts_total") == "9"
        wait_row(page, bob.pk, "r.querySelector('[data-field=calls]').textContent === '6'")
        assert row_value(page, bob.pk, "attempts_total") == "12"
        assert row_value(page, bob.pk, "fast_failed") == "3"
        assert "8/8 ok" in row_value(page, alice.pk, "summary")
        assert "0/6 ok, 3 fast-failed, 12 attempts" in row_value(page, bob.pk, "summary")
        shot(page, "2-after-bursts")

        # Alice has her lab page open while the instructor acts.
        alice_page = student.new_page()
        login(alice_page, daphne_server, "alice", DEFAULT_PASSWORD)
        alice_page.goto(f"{daphne_server}/sessions/{alice.pk}/")
        alice_page.wait_for_selector('#live-status[data-state="live"]')

        # 2. A class-wide "down": a bad duration is refused first and changes nothing.
        assert page.locator("#fault-mode option[value='rate_limited']").text_content() == (
            "Rate limited"
        )
        page.select_option("#fault-mode", "down")
        # The input's min/max stop this in the browser; the server must refuse it anyway.
        page.evaluate("document.getElementById('fault-form').noValidate = true")
        page.fill("#fault-duration", "7200")
        page.click("#fault-submit")
        expect(page.locator("#action-result")).to_contain_text(
            "Duration: must be between 1 and 3600 s (got 7200)"
        )
        expect(page.locator("#action-result")).to_contain_text("no session was changed")
        assert not JournalEvent.objects.filter(kind="fault_injected").exists()
        page.fill("#fault-duration", "")
        page.click("#fault-submit")
        expect(page.locator("#action-result")).to_contain_text("Down: applied to 2 sessions")
        for session in (alice, bob):
            wait_row(page, session.pk, "r.dataset.mode === 'down'")
            # the mode in the lab page's words, not its code word
            expect(page.locator(f"#row-{session.pk} .c-mode")).to_have_text("Down")
            row = JournalEvent.objects.get(session=session, kind="fault_injected")
            assert row.message.startswith("fault injected by teacher_a: down")
        shot(page, "3-class-down")
        # ... live in alice's open journal, and in bob's when he opens his page.
        expect(
            alice_page.locator(".journal-row", has_text="fault injected by teacher_a")
        ).to_have_count(1)
        alice_page.screenshot(path=str(ARTIFACTS / "dashboard-4-alice-journal.png"), full_page=True)
        bob_page = other_student.new_page()
        login(bob_page, daphne_server, "bob", DEFAULT_PASSWORD)
        bob_page.goto(f"{daphne_server}/sessions/{bob.pk}/")
        expect(
            bob_page.locator(".journal-row", has_text="fault injected by teacher_a")
        ).to_have_count(1)

        # 3. Drill-down: the instructor opens alice's page from her row: read-only and live.
        with page.expect_navigation():
            page.click(f"#row-{alice.pk} a[data-field=student]")
        page.wait_for_selector('#live-status[data-state="live"]')
        expect(page.locator("#run-burst")).to_be_disabled()
        before = page.locator(".journal-row").count()
        burst_done(off_loop(bursts.burst_start, session=alice, user=alice.owner, size=2))
        page.wait_for_function(
            "n => document.querySelectorAll('.journal-row').length > n", arg=before + 5
        )
        shot(page, "5-drill-down-read-only")
        assert not errors, errors
    finally:
        shot(page, "6-final")
        for context in (teacher, student, other_student):
            context.close()


def test_instructor_of_another_class_is_refused_over_http_and_websocket(
    browser, daphne_server, cohort
):
    room, _ = cohort
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, daphne_server, "teacher_b", DEFAULT_PASSWORD)
        assert f"/classes/{room.pk}/dashboard/" not in page.content()  # not on their home page
        response = page.goto(f"{daphne_server}/classes/{room.pk}/dashboard/")
        assert response.status == 404
        code = page.evaluate(
            """path => new Promise(resolve => {
                   const ws = new WebSocket('ws://' + location.host + path);
                   ws.onclose = event => resolve(event.code);
               })""",
            f"/ws/classes/{room.pk}/",
        )
        assert code == 4403
        shot(page, "7-other-instructor-refused")
    finally:
        context.close()


def test_the_dashboard_shows_the_storm_section_live_from_the_storm_websocket(
    browser, daphne_server, cohort
):
    """With a shared dependency configured, the dashboard carries the storm panel's parts,
    drawn by the same script from the same websocket: attempts counted in the Redis model
    reach its chart and its headline, its per-student table lists the class, and nothing
    breaks the CSP or the dashboard's own grid."""
    from labs.live import runtime
    from labs.services import shared as shared_services
    from tests.e2e.test_csp import REPORT_VIOLATIONS

    room, _sessions = cohort
    teacher_user = room.memberships.get(role="instructor").user
    off_loop(shared_services.classroom_set_shared, classroom=room, user=teacher_user, values={})
    model = runtime.configure_shared(room.pk)
    model.reset()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.expose_function("__reportCspViolation", lambda text: errors.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    try:
        login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/classes/{room.pk}/dashboard/")
        page.wait_for_selector('#live-status[data-state="live"]')
        expect(page.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        for attempt in (1, 1, 1, 2):
            model.decide(attempt=attempt)
        page.wait_for_function(
            "() => window.failureLabStorm.points().reduce((n, p) => n + p.offered, 0) === 4"
            " && window.failureLabStorm.tableRows() === 2",
            timeout=LIVE_TIMEOUT_MS,
        )
        shown = sum(p["retries"] for p in page.evaluate("() => window.failureLabStorm.points()"))
        assert shown == 1 == sum(s.retries for s in model.counters())
        assert page.locator("#chart-load canvas").count() == 1
        assert page.inner_text('[data-count="total"]') == "2"  # the grid is still live
        shot(page, "storm-section")
        assert errors == []
    finally:
        model.clear()
        context.close()


#: The words of the sessions table's headers and cells that a line break cut in two: a word
#: drawn on more than one line box.
BROKEN_WORDS = """cells => cells.flatMap(cell => {
  const out = [];
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.textContent.matchAll(/[^\\s-]+-?/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
  return out;
})"""


def test_the_sessions_table_breaks_no_word_and_never_scrolls_the_page(
    browser, daphne_server, cohort
):
    room, sessions = cohort
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/classes/{room.pk}/dashboard/")
        page.wait_for_selector('#live-status[data-state="live"]')
        # The widest labels a row shows, in the first row (as a live update would set them).
        page.evaluate(
            """([id, mode]) => { const r = document.getElementById('row-' + id);
                       r.querySelector('[data-field=state]').textContent = 'half-open';
                       r.querySelector('[data-field=mode]').textContent = mode;
                       r.querySelector('[data-field=activity]').textContent = 'bursting'; }""",
            [sessions[0].pk, max(MODE_LABELS.values(), key=len)],
        )
        for width, height in ((1400, 900), (1920, 1080)):
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(200)
            assert page.eval_on_selector_all("#dash-table thead th", BROKEN_WORDS) == []
            assert page.eval_on_selector_all(
                "#dash-table [data-field=state], #dash-table [data-field=mode],"
                " #dash-table [data-field=activity]", BROKEN_WORDS
            ) == []  # fmt: skip
            # The table fits its box: it scrolls neither the page nor itself.
            assert page.evaluate(
                """() => { const w = document.querySelector('.table-wrap');
                           return [w.scrollWidth <= w.clientWidth,
                                   document.documentElement.scrollWidth <= innerWidth]; }"""
            ) == [True, True]
            page.locator(".table-wrap").screenshot(
                path=str(ARTIFACTS / f"dashboard-table-{width}.png")
            )
        # Narrower than the columns need, the table scrolls in its own box, not the page.
        page.set_viewport_size({"width": 1000, "height": 900})
        page.wait_for_timeout(200)
        assert page.evaluate(
            """() => { const w = document.querySelector('.table-wrap');
                       return [w.scrollWidth > w.clientWidth,
                               document.documentElement.scrollWidth <= innerWidth]; }"""
        ) == [True, True]
        assert page.eval_on_selector_all("#dash-table thead th", BROKEN_WORDS) == []
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_timeout(200)
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        assert page.locator("#dash-table thead").is_hidden()  # a card per row
        shot(page, "table-390")
        assert errors == []
    finally:
        context.close()
