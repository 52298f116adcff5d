"""The Content-Security-Policy in real Chromium: no page of the lab breaks it.

One browser context collects every ``securitypolicyviolation`` event (reported to the test
through an exposed function, so none is lost to a navigation), every console error and
every uncaught page error, across: the login page; a student's lab page with a burst run
from its form (an htmx POST that swaps the form) and its websocket pushes arriving; the
dependency form (another htmx swap); an experiments page rerun through htmx; the class
dashboard live, with a class-wide reset (htmx, behind hx-confirm); the admin's index and a
change form. The test asserts there were none. Also: daphne sends no ``Server`` header,
neither on an HTTP response nor on a websocket handshake (lab_project/processes.py).
"""

from __future__ import annotations

import socket
import urllib.request
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from labs.services import lab
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
    tour_script,
)
from tests.e2e.conftest import ARTIFACTS, login, show_setting

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000

REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (event) {
  window.__reportCspViolation([event.violatedDirective, event.blockedURI,
                               event.sourceFile + ":" + event.lineNumber, event.sample].join(" | "));
});
"""


@pytest.fixture
def room(db):
    scenario = make_scenario("tour", title="The tour", script=tour_script(
        dependency={"mode": "healthy", "latency_ms": 50}))  # fmt: skip
    classroom = make_classroom("Resilience A", join_code="CLASSA01")
    classroom.scenarios.add(scenario)
    make_instructor("teacher_a", classroom)
    alice = make_student("alice", classroom)
    session = lab.session_open(user=alice, classroom=classroom, scenario=scenario)
    return classroom, session


@pytest.fixture
def watched(browser):
    """A context whose pages report CSP violations, console errors and page errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # One test walks five pages, a burst and an experiment rerun: on a loaded machine any step
    # may take several seconds, so each gets the burst's margin (a pass never waits for it).
    context.set_default_timeout(BURST_TIMEOUT_MS)
    problems: list[str] = []
    context.expose_function("__reportCspViolation", lambda text: problems.append(f"CSP: {text}"))
    context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console {msg.type}: {msg.text} ({page.url})")
            if msg.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc} ({page.url})"))
    page.on(
        "response",
        lambda r: (
            problems.append(f"HTTP {r.status}: {r.request.method} {r.url}")
            if r.status >= 400
            else None
        ),
    )
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm
    try:
        yield page, problems
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "csp-last-page.png"), full_page=True)
        context.close()


def settle(page) -> None:
    """Let late violations (a script run after load, a deferred style) be reported."""
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)


def test_no_page_breaks_the_policy_and_htmx_still_swaps(daphne_server, e2e_worker, room, watched):
    page, problems = watched
    classroom, session = room

    response = page.goto(f"{daphne_server}/accounts/login/")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe" not in csp
    assert f"ws://{urlsplit(daphne_server).netloc}" in csp
    settle(page)

    # The lab page: a burst from its form (htmx swaps the form), pushed live over the socket.
    login(page, daphne_server, "alice", DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    page.wait_for_selector('#live-status[data-state="live"]')
    page.fill("#id_size", "3")
    page.fill("#id_concurrency", "1")
    page.evaluate("window.__sameDocument = true")
    page.click("#run-burst")
    page.wait_for_function(
        "() => document.querySelector('#burst-message').textContent.includes('queued')"
    )
    page.wait_for_function(
        """() => { const s = document.getElementById('burst-summary');
                   return s.dataset.status === 'done'
                          && s.querySelector('[data-stat="calls"]').textContent === '3'; }""",
        timeout=BURST_TIMEOUT_MS,
    )
    assert page.locator("#journal-rows .journal-row").count() > 3  # pushed over the websocket
    show_setting(page, "#id_latency_ms")
    page.fill("#id_latency_ms", "60")
    page.click("#mode-flaky")
    page.wait_for_selector('#mode-flaky[aria-pressed="true"]')
    assert page.evaluate("window.__sameDocument === true"), "a form did a full page load"
    settle(page)

    # An experiment rerun through htmx (its indicator is styled by lab.css, not by htmx).
    page.goto(f"{daphne_server}/experiments/storm/")
    before = page.locator("#results").get_attribute("data-checksum")
    page.fill("#id_clients", "100")
    page.click("#experiment-form button[type=submit]")
    page.wait_for_function(
        "old => document.querySelector('#results').dataset.checksum !== old", arg=before
    )
    expect(page.locator("#run-indicator")).to_be_hidden()
    settle(page)

    # The class dashboard, live; a class-wide reset (hx-confirm, then an htmx swap).
    page.context.clear_cookies()
    login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/classes/{classroom.pk}/dashboard/")
    page.wait_for_selector('#live-status[data-state="live"]')
    page.wait_for_selector(f'#row-{session.pk}[data-mode="flaky"]')
    page.click("#reset-submit")
    page.wait_for_function(
        "() => document.querySelector('#action-result').textContent.trim() !== ''"
    )
    settle(page)

    # The admin: its index and a change form (with its inlines and their scripts).
    page.goto(f"{daphne_server}/admin/")
    page.wait_for_selector("#content")
    page.goto(f"{daphne_server}/admin/labs/classroom/{classroom.pk}/change/")
    page.wait_for_selector("#classroom_form")
    settle(page)

    assert problems == []


def test_daphne_sends_no_server_header(daphne_server):
    with urllib.request.urlopen(f"{daphne_server}/accounts/login/") as response:  # noqa: S310
        assert response.status == 200
        assert response.headers.get("Server") is None

    host, port = urlsplit(daphne_server).hostname, urlsplit(daphne_server).port
    handshake = (
        "GET /ws/classes/1/ HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        f"Origin: http://{host}:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(handshake.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert head.startswith("http/1.1 101"), head
    assert "\r\nserver:" not in head, head
