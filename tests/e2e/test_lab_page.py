"""The live lab page in headless Chromium against daphne, a real Celery worker and Redis.

A student runs the tour by clicking (scenarios/tour.json): flaky 3 and a burst of 6; down and a
burst of 6 (the breaker opens and counts its cooldown down); healthy, the cooldown runs out
(HALF-OPEN), a burst of 1 (the probe closes it). Mid-way through the first burst the browser
goes offline for 5 s; afterwards the rows on the page are exactly the journal in the
database. A student of another class can open neither the page nor its websocket.

Latencies are raised (800 ms, then 300 ms per attempt) so each burst lasts long enough to be
watched while it runs.

Why the test also drops the socket itself: ``context.set_offline(True)`` makes Chromium
refuse new requests, but it does not reliably cut a websocket that is already open (the
connection keeps delivering frames). A real network loss leaves the page with a dead socket
that its ping watchdog detects seconds later; the test gets the same state at once through
``window.failureLab.dropConnection()``, which abandons the socket the way the watchdog does.
The reconnect attempts made while offline then fail, like on a real dead network.

Screenshots go to artifacts/e2e/. With ``LAB_UPDATE_README_SCREENSHOT=1`` the mid-burst
screenshot is also written to docs/img/lab-page.png (the README's picture).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from playwright.sync_api import expect

from labs.models import JournalEvent
from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, ROOT, login, show_setting

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

README_SHOT = ROOT / "docs" / "img" / "lab-page.png"
BURST_TIMEOUT_MS = 45_000


@pytest.fixture
def tour(db):
    scenario = make_scenario(
        "tour",
        title="The tour",
        instructions="Break the dependency on purpose and watch the **breaker** decide.",
    )
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    other_room = make_classroom("Resilience B", join_code="CLASSB02")
    other_room.scenarios.add(scenario)
    alice = make_student("alice", room)
    make_student("bob", other_room)
    return lab.session_open(user=alice, classroom=room, scenario=scenario)


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"lab-page-{name}.png"), full_page=True)


def badge_text(page) -> str:
    return page.inner_text('#breaker-badge [data-role="state"]').strip()


def wait_for_badge(page, label: str, timeout: float = BURST_TIMEOUT_MS) -> None:
    page.wait_for_function(
        """label => document.querySelector('#breaker-badge [data-role="state"]')
                     .textContent.trim() === label""",
        arg=label,
        timeout=timeout,
    )


def marks_of(cls: str, chart: str = "document.getElementById('timeline-chart')") -> str:
    """A script expression: the timeline's drawn marks of class ``cls`` (the chart is a uPlot
    canvas; static/js/lab/canvas.js keeps what it drew on the element as ``timelineMarks``)."""
    return f"({chart}.timelineMarks || []).filter(m => m.class.split(' ').includes('{cls}'))"


def set_dependency(page, mode_button: str, latency_ms: int, **fields: str) -> None:
    show_setting(page, "#id_latency_ms")
    page.fill("#id_latency_ms", str(latency_ms))
    for name, value in fields.items():
        show_setting(page, f"#id_{name}")
        page.fill(f"#id_{name}", value)
    page.click(f"#mode-{mode_button}")
    page.wait_for_selector(f'#mode-{mode_button}[aria-pressed="true"]')
    page.wait_for_function(
        "() => document.querySelector('#dependency-form .form-message').textContent"
        ".includes('Dependency set.')"
    )


def run_burst(page, size: int) -> None:
    page.fill("#id_size", str(size))
    page.fill("#id_concurrency", "1")
    page.click("#run-burst")
    page.wait_for_function(
        "() => document.querySelector('#burst-message').textContent.includes('queued')"
    )


def wait_burst_done(page, number: int) -> None:
    page.wait_for_function(
        """n => { const s = document.getElementById('burst-summary');
                  return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
        arg=number,
        timeout=BURST_TIMEOUT_MS,
    )


def stat(page, name: str) -> int:
    return int(page.inner_text(f'#burst-summary [data-stat="{name}"]'))


def page_rows(page) -> list[tuple[int, str]]:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#journal-rows .journal-row'))
                 .map(r => [Number(r.dataset.seq), r.querySelector('.j-msg').textContent])"""
    )


def test_student_runs_the_tour_live_and_the_page_matches_the_journal(
    browser, daphne_server, e2e_worker, tour
):
    session = tour
    context = browser.new_context(viewport={"width": 1440, "height": 1500})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        assert badge_text(page) == "CLOSED"

        # 1. flaky 3, burst of 6: attempts appear while it runs; offline for 5 s mid-burst.
        set_dependency(page, "flaky", 800, fail_count="3")
        run_burst(page, 6)
        page.wait_for_function(
            """() => document.getElementById('burst-summary').dataset.status === 'running'
                     && document.querySelectorAll('.journal-row[data-kind="attempt"]').length >= 2""",
            timeout=BURST_TIMEOUT_MS,
        )
        page.wait_for_function(f"() => {marks_of('tl-bad')}.length > 0")  # grows live
        shot(page, "1-flaky-running")
        seen_before_offline = page.evaluate("failureLab.lastSeq()")
        context.set_offline(True)
        if page.evaluate("failureLab.isConnected()"):
            page.evaluate("failureLab.dropConnection()")  # see the module docstring
        offline_since = time.monotonic()
        page.wait_for_selector('#live-status[data-state="offline"]')
        time.sleep(max(0.0, 5.0 - (time.monotonic() - offline_since)))
        missed_while_offline = JournalEvent.objects.filter(
            session=session, seq__gt=page.evaluate("failureLab.lastSeq()")
        ).count()
        context.set_offline(False)
        page.wait_for_selector('#live-status[data-state="live"]', timeout=30_000)
        assert page.evaluate("failureLab.connections()") >= 2
        wait_burst_done(page, 1)
        assert missed_while_offline > 0, "the offline window should have missed some events"
        assert page.evaluate("failureLab.lastSeq()") > seen_before_offline
        assert (stat(page, "succeeded"), stat(page, "attempts_total")) == (6, 9)
        assert stat(page, "waiting_ms_total") == 175

        # 2. down, burst of 6: three calls fail after 4 attempts, the breaker opens, the rest
        #    fail fast; the badge counts the 2 s cooldown down, then reads HALF-OPEN.
        set_dependency(page, "down", 300)
        run_burst(page, 6)
        page.wait_for_function(  # call 9's second attempt: calls 7 and 8 have failed
            """() => document.querySelectorAll('.journal-row[data-kind="attempt"]').length >= 19
                     && document.getElementById('burst-summary').dataset.status === 'running'""",
            timeout=BURST_TIMEOUT_MS,
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        # The README's picture: the state, the summary and the timeline, mid-burst.
        # From the page's top (the steps card is sticky: scrolled, it would sit lower), down
        # to the timeline: the box is measured in the viewport, the clip in the page.
        page.evaluate("() => window.scrollTo(0, 0)")
        box = page.locator(".timeline-card").bounding_box()
        page.screenshot(
            path=str(ARTIFACTS / "lab-page-mid-burst.png"),
            full_page=True,
            clip={"x": 0, "y": 0, "width": 1440, "height": box["y"] + box["height"] + 20},
        )
        if os.environ.get("LAB_UPDATE_README_SCREENSHOT") == "1":
            README_SHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ARTIFACTS / "lab-page-mid-burst.png", README_SHOT)
        wait_for_badge(page, "OPEN")
        seconds = float(page.inner_text('#breaker-badge [data-role="seconds"]'))
        assert 0 < seconds <= 2.0
        wait_burst_done(page, 2)
        assert (stat(page, "failed"), stat(page, "fast_failed")) == (3, 3)
        assert stat(page, "attempts_total") == 12
        shot(page, "2-open-counting-down")
        page.wait_for_function(
            """s => parseFloat(document.querySelector('#breaker-badge [data-role="seconds"]')
                   ?.textContent ?? '0') < s""",
            arg=seconds,
        )  # the countdown moves
        page.wait_for_function(f"() => {marks_of('tl-fast')}.length === 3")

        # 3. healthy; the cooldown runs out (HALF-OPEN); one call is the probe and closes it.
        set_dependency(page, "healthy", 300)
        wait_for_badge(page, "HALF-OPEN", timeout=5_000)
        shot(page, "3-half-open")
        run_burst(page, 1)
        wait_burst_done(page, 3)
        wait_for_badge(page, "CLOSED")
        assert stat(page, "succeeded") == 1
        page.wait_for_function(f"() => {marks_of('tl-probe')}.length === 1")
        expect(page.locator(".journal-row", has_text="HALF-OPEN -> CLOSED")).to_have_count(1)
        shot(page, "4-closed")

        # The page holds exactly the journal: no gap, no duplicate, newest first.
        last = JournalEvent.objects.filter(session=session).order_by("-seq").first().seq
        page.wait_for_function("n => failureLab.lastSeq() === n", arg=last)
        database = list(
            JournalEvent.objects.filter(session=session)
            .order_by("-seq")
            .values_list("seq", "message")
        )
        assert [tuple(row) for row in page_rows(page)] == database
        assert [seq for seq, _ in database] == list(range(last, 0, -1))
        assert not errors, errors
    finally:
        shot(page, "5-final")
        context.close()


def test_a_student_of_another_class_can_open_neither_the_page_nor_the_websocket(
    browser, daphne_server, tour
):
    session = tour
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        login(page, daphne_server, "bob", DEFAULT_PASSWORD)
        response = page.goto(f"{daphne_server}/sessions/{session.pk}/")
        assert response is not None and response.status == 404
        shot(page, "other-student-404")
        code = page.evaluate(
            """path => new Promise(resolve => {
                   const ws = new WebSocket('ws://' + location.host + path);
                   ws.onmessage = () => resolve('got a message');
                   ws.onclose = event => resolve(event.code);
               })""",
            f"/ws/sessions/{session.pk}/?after=0",
        )
        assert code == 4403
        response = page.request.get(f"{daphne_server}/sessions/{session.pk}/export.json")
        assert response.status == 404
    finally:
        context.close()


def test_scenario_steps_can_be_done_from_the_checklist_and_stay_ticked(
    browser, daphne_server, tour
):
    session = tour
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        expect(page.locator('.step[data-step="1"]')).to_have_class(re.compile("is-current"))
        page.check("#step-1")  # done by hand
        page.locator('.step[data-step="2"] [data-step-do]').click()  # "Set the dependency to down"
        expect(page.locator('#dependency-form [data-role="mode"]')).to_have_text("Down")
        expect(page.locator("#step-2")).to_be_checked()
        expect(page.locator('.step[data-step="3"]')).to_have_class(re.compile("is-current"))
        page.reload()
        expect(page.locator("#step-1")).to_be_checked()
        expect(page.locator("#step-2")).to_be_checked()
        session.refresh_from_db()
        assert session.dependency["mode"] == "down"
    finally:
        context.close()


def burst_post(response) -> bool:
    return response.request.method == "POST" and response.url.endswith("/bursts/")


def test_a_refused_burst_shows_the_range_and_the_corrected_click_clears_it(
    browser, daphne_server, e2e_worker, tour
):
    """A size out of range is refused beside its field; the corrected click queues the burst
    and the field's error is gone (a click in a form showing errors is posted and gets the
    whole form back; one in a form showing none goes over the live socket and gets only the
    message line back; the refused first click went over the socket too, and the server
    sent the page to the form for the field's error)."""
    session = tour
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        frames = frames_of(page)
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        page.fill("#id_size", "500")
        page.click("#run-burst")
        error = page.locator('#burst-form [data-field="size"] .field-error')
        expect(error).to_contain_text("between")
        # The answers are read from the responses: the page clears the message line when
        # the burst's end arrives, which a short burst may bring at once.
        page.fill("#id_size", "3")
        with page.expect_response(burst_post) as answer:
            page.click("#run-burst")
        body = answer.value.text()
        assert (
            body.lstrip().startswith('<form id="burst-form"') and "Burst 1 queued: 3 calls." in body
        )
        assert "field-error" not in body
        expect(error).to_have_count(0)
        expect(page.locator("#id_size")).to_have_value("3")
        page.fill("#id_size", "2")
        wait_burst_done(page, 1)
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if burst_post_request(r) else None)
        before = len(frames)
        page.click("#run-burst")  # no error on show: the click goes over the live socket
        reply = wait_frame(page, frames, lambda m: m.get("type") == "burst_reply", start=before)
        assert reply["status"] == 200
        assert reply["html"].startswith('<p id="burst-message"')
        assert "Burst 2 queued: 2 calls." in reply["html"]
        wait_burst_done(page, 2)
        assert posts == []  # nothing posted: the form's message line came back on the socket
        expect(page.locator("#id_size")).to_have_value("2")
    finally:
        context.close()


def burst_post_request(request) -> bool:
    return request.method == "POST" and request.url.endswith("/bursts/")


def frames_of(page) -> list[dict]:
    """Every JSON message the page's websockets receive, from now on."""
    frames: list[dict] = []

    def opened(ws):
        ws.on("framereceived", lambda payload: frames.append(json.loads(payload)))

    page.on("websocket", opened)
    return frames


def wait_frame(page, frames: list[dict], match, *, start: int = 0, timeout_s: float = 20.0) -> dict:
    """The first of ``frames`` from index ``start`` on that ``match`` accepts, waiting with
    ``page.wait_for_timeout`` (Playwright delivers its events only while a call of its own
    runs, never during a plain ``time.sleep``)."""
    deadline = time.monotonic() + timeout_s
    seen = start
    while time.monotonic() < deadline:
        for message in frames[seen:]:
            if match(message):
                return message
        seen = len(frames)
        page.wait_for_timeout(50)
    raise AssertionError(f"no such websocket message in {timeout_s} s")


def test_without_a_live_socket_run_burst_is_posted(browser, daphne_server, e2e_worker, tour):
    """A page whose websocket cannot connect (here: every socket refused by the browser)
    still runs its bursts: the click is posted as a form."""
    session = tour
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.route_web_socket(re.compile(r".*/ws/.*"), lambda ws: ws.close(code=1011))
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.fill("#id_size", "3")
        with page.expect_response(burst_post) as answer:
            page.click("#run-burst")
        assert answer.value.status == 200
        assert "Burst 1 queued: 3 calls." in answer.value.text()
        assert page.evaluate("window.failureLab.burstsAsked()") == 0
        assert session.bursts.count() == 1
    finally:
        context.close()
