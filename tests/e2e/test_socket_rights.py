"""What the live lab page shows when the right that let its socket in ends: signed out from
another tab (the Django session deleted), the page says live updates stopped, in words, and
does not reconnect (labs.consumers.base.RightCheck; the page's 4403 handling in static/js/lab/socket.js)."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session
from playwright.sync_api import expect

from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, login

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("viewport", [(1920, 1080), (390, 844)], ids=["desktop", "phone"])
def test_a_signed_out_page_says_its_live_updates_stopped(browser, daphne_server, viewport):
    scenario = make_scenario("rights", title="Rights")
    room = make_classroom("Rights E2E", join_code="RIGHTSE2")
    room.scenarios.add(scenario)
    student = make_student("rhea", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    width, height = viewport
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        login(page, daphne_server, "rhea", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        status = page.locator("#live-status")
        expect(status).to_have_attribute("data-state", "live", timeout=20_000)
        Session.objects.all().delete()  # signed out elsewhere: the session is gone
        expect(status).to_have_attribute("data-state", "denied", timeout=20_000)
        expect(status).to_have_text("Live updates stopped: reload the page.")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"socket-rights-signed-out-{width}.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert errors == []
    finally:
        context.close()
