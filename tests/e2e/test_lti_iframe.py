"""A learner's launch inside an LMS iframe, in Chromium: the course page is served by the test
LMS from another site (``localhost``) than the lab (daphne on ``127.0.0.1``), so the lab is a
third party in the frame. The launch's state cookie travels as a partitioned cookie; the lab
page opens in the frame signed in and its websocket goes live. With third-party cookies
blocked and every cookie of the lab then cleared, the page still works on its launch-scoped
token alone: reloaded, its websocket connects again and a setting's change arrives live. A
launch the platform asks to open in a window opens in a new tab and says why."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlencode

import pytest

from labs.models import LabSession, Scenario
from tests.e2e.conftest import ARTIFACTS, CHROMIUM_ARGS, ROOT, chromium_executable
from tests.lti_platform import Launch, Platform, register

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: Where the screenshots go (artifacts/e2e by default).
SHOTS = Path(os.environ.get("LAB_LTI_SHOTS", str(ARTIFACTS)))
SIZES = {"desktop": (1920, 1080), "phone": (390, 844)}


@pytest.fixture
def lms(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    platform = Platform().start()
    register(platform)
    yield platform
    platform.stop()


@pytest.fixture
def cookieless_context(browser, tmp_path):
    """A Chromium profile set to block third-party cookies (as a user can in its settings)."""
    profile = tmp_path / "profile"
    (profile / "Default").mkdir(parents=True)
    prefs = {"profile": {"cookie_controls_mode": 1, "block_third_party_cookies": True}}
    (profile / "Default" / "Preferences").write_text(json.dumps(prefs))
    context = browser.browser_type.launch_persistent_context(
        str(profile), executable_path=chromium_executable(), headless=True, args=CHROMIUM_ARGS,
        viewport={"width": 1920, "height": 1080},
    )  # fmt: skip
    context.set_default_timeout(30_000)
    yield context
    context.close()


def login_url(daphne_server: str, lms: Platform, hint: str) -> str:
    return f"{daphne_server}/lti/login/?" + urlencode(
        {
            "iss": lms.issuer,
            "client_id": lms.client_id,
            "login_hint": "student-1",
            "lti_message_hint": hint,
            "target_link_uri": f"{daphne_server}/lti/launch/",
        }
    )


def tour() -> None:
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    Scenario.objects.create(slug="tour", title="The tour", script=script)


def shoot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / f"{name}-{size}.png"))


def test_a_learner_launch_in_an_iframe_goes_live_on_its_launch_token_alone(
    cookieless_context, daphne_server, lms
):
    tour()
    course = lms.url("/course").replace("127.0.0.1", "localhost")
    lms.plan("hint-iframe", Launch(custom={"lesson": "tour"}, return_url=course))
    lms.course_iframe_src = login_url(daphne_server, lms, "hint-iframe")
    page = cookieless_context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(course)
    frame = page.frame_locator("#tool")
    frame.locator('#live-status[data-state="live"]').wait_for()
    session = LabSession.objects.get()
    assert session.owner.get_full_name() == "Grace Hopper"
    assert frame.locator(".messages").inner_text() == "Opened from your course, inside its page."
    assert "The tour" in frame.locator("h1").first.inner_text()
    tool = next(f for f in page.frames if f.url.startswith(daphne_server))
    assert tool.url.startswith(f"{daphne_server}/sessions/{session.pk}/?launch=")
    # Third-party cookies are blocked: an ordinary cookie of the lab is not kept in the frame.
    kept = tool.evaluate("document.cookie = 'probe=1; SameSite=None; Secure'; document.cookie")
    assert "probe=1" not in kept
    shoot(page, "lti-iframe-landing")
    page.set_viewport_size({"width": 1920, "height": 1080})
    # No cookie of the lab at all from now on: the page and its socket have the token only.
    cookieless_context.clear_cookies()
    tool.goto(tool.url)
    frame.locator('#live-status[data-state="live"]').wait_for()
    assert not cookieless_context.cookies(daphne_server)
    # A change through htmx (CSRF-checked) comes back over the websocket as a journal row.
    rows = frame.locator("#journal-rows .journal-row")
    before = rows.count()
    frame.locator('#steps button[hx-post$="/dependency/"]').first.click()
    frame.locator("#dependency-form .form-message", has_text="Dependency set.").wait_for(state="attached")
    frame.locator("#journal-rows .journal-row").nth(before).wait_for()
    row = frame.locator("#journal-rows .journal-row .j-msg").last.inner_text()
    assert "down" in row.lower(), row
    session.refresh_from_db()
    assert session.dependency["mode"] == "down"
    assert not [e for e in errors if "Content Security Policy" in e or "frame" in e], errors
    shoot(page, "lti-iframe")


def test_a_launch_for_a_window_opens_in_a_new_tab_and_says_why(browser, daphne_server, lms):
    tour()
    course = lms.url("/course").replace("127.0.0.1", "localhost")
    launch = Launch(custom={"lesson": "tour"}, return_url=course, document_target="window")
    lms.plan("hint-window", launch)
    lms.course_window_href = login_url(daphne_server, lms, "hint-window")
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        page.goto(course)
        with context.expect_page() as opened:
            page.click("#tool-link")
        tab = opened.value
        tab.locator('#live-status[data-state="live"]').wait_for()
        notice = tab.locator(".messages").inner_text()
        assert notice.startswith("Opened in a new tab because your course asks"), notice
        shoot(tab, "lti-new-tab")
    finally:
        context.close()
