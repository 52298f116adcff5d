"""A learner's launch inside an LMS iframe, in Chromium: the course page is served by the test
LMS from another site (``localhost``) than the lab (daphne on ``127.0.0.1``), so the lab is a
third party in the frame. The launch's state, session and CSRF cookies travel as partitioned
cookies; the lab page opens in the frame, signed in, and its websocket goes live."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from labs.models import LabSession, Scenario
from tests.e2e.conftest import ARTIFACTS, ROOT
from tests.lti_platform import Launch, Platform, register

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lms(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    platform = Platform().start()
    register(platform)
    yield platform
    platform.stop()


def test_a_learner_launch_in_an_iframe_of_another_site_goes_live(browser, daphne_server, lms):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    Scenario.objects.create(slug="tour", title="The tour", script=script)
    course = lms.url("/course").replace("127.0.0.1", "localhost")
    lms.plan("hint-iframe", Launch(custom={"lesson": "tour"}, return_url=course))
    lms.course_iframe_src = f"{daphne_server}/lti/login/?" + urlencode(
        {
            "iss": lms.issuer,
            "client_id": lms.client_id,
            "login_hint": "student-1",
            "lti_message_hint": "hint-iframe",
            "target_link_uri": f"{daphne_server}/lti/launch/",
        }
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto(course)
        frame = page.frame_locator("#tool")
        frame.locator('#live-status[data-state="live"]').wait_for()
        session = LabSession.objects.get()
        assert session.owner.get_full_name() == "Grace Hopper"
        assert frame.locator(".messages").inner_text() == (
            "Opened from your course, inside its page."
        )
        heading = frame.locator("h1").first.inner_text()
        assert "The tour" in heading, heading
        tool_frame = next(f for f in page.frames if f.url.startswith(daphne_server))
        assert tool_frame.url == f"{daphne_server}/sessions/{session.pk}/"
        assert not [e for e in errors if "Content Security Policy" in e or "frame" in e], errors
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "lti_iframe.png"), full_page=True)
        context.close()
