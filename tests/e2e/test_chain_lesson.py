"""A chain of students, in headless Chromium against daphne, a real Celery worker and Redis:
the instructor arranges nine sessions (a student and eight bots following the lesson) in
three tiers on the class dashboard, the front tier's bots run steady traffic through the
chain while the shared dependency is down, the storm panel's chain table shows each tier
tripling the calls it receives and 27 hits on the shared dependency per user request, and
the student's prediction of 27 for one call at the front is graded right from the burst.

What the pages show is checked as text: the form holds back a tier count out of range, its
answer and its "Now:" line say the layout, the student's journal says the tier, the panel's
rows and leaf line carry the figures. At 1920x1080 and 390x844; no console error, no CSP
violation. With ``LAB_UPDATE_README_SCREENSHOT=1`` the panel's screenshot also goes to
docs/img/ for the README.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from playwright.sync_api import expect

from labs.models import LabSession, Traffic
from labs.services import lab
from labs.services.shared import classroom_set_shared
from labs.services.simulate import classroom_simulate
from labs.services.traffic import traffic_start
from tests.e2e.conftest import ARTIFACTS, ROOT
from tests.e2e.test_dashboard import off_loop
from tests.e2e.test_find_the_edge import (
    LIVE_TIMEOUT_MS,
    class_contexts,
    lesson_class,
    signed_in,
    watch,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LESSON = json.loads((ROOT / "scenarios" / "chain_of_students.json").read_text())
BOTS = 8
TRIGGER_MS = 120_000


@pytest.fixture
def chain_class(db):
    """The lesson's class on a dependency that serves the front bots' load with room to
    spare (8 servers x 20 ms: 400 attempts/s against 6 calls/s x 27): a down trigger fails
    each attempt after its service time, so a queue would turn the chain's 503s into
    timeouts."""
    room, session = lesson_class(LESSON, "CHAIN001", "c")
    teacher = room.memberships.get(role="instructor").user
    classroom_set_shared(classroom=room, user=teacher, values={"servers": 8, "service_ms": 20})
    return room, session


def bots_following_the_lesson(room) -> None:
    """Eight bots on the shared dependency with the lesson's policy, their breakers held
    closed, and no traffic running (a short run makes their sessions)."""
    classroom_simulate(
        classroom=room, students=BOTS, policy="naive", rate=1, duration_s=1, arrivals="even"
    )
    deadline = time.monotonic() + 60
    active = Traffic.objects.filter(session__classroom=room, status__in=Traffic.ACTIVE_STATUSES)
    while active.exists():
        assert time.monotonic() < deadline, "the bots' first runs did not end"
        time.sleep(0.2)
    for session in LabSession.objects.simulated().filter(classroom=room):
        lab.session_set_policy(session=session, user=session.owner, changes=LESSON["policy"])
        session = LabSession.objects.get(pk=session.pk)
        lab.session_force_breaker(session=session, user=session.owner, action="closed")


def front_traffic(room) -> None:
    """The front tier's bots' steady traffic, with the lesson's policy kept (the others
    answer it)."""
    for bot in LabSession.objects.simulated().filter(classroom=room, tier=1):
        traffic_start(session=bot, user=bot.owner, rate=3, duration_s=300, arrivals="even")


def chain_figures(panel) -> dict:
    """The panel's chain table as a person reads it."""
    rows = panel.locator("#chain-rows tr")
    return {
        "rows": [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())],
        "leaf": panel.locator("#chain-leaf").inner_text(),
    }


def test_three_tiers_of_students_show_27_hits_per_request_and_grade_the_prediction(
    browser, daphne_server, e2e_worker, chain_class
):
    room, session = chain_class
    off_loop(bots_following_the_lesson, room=room)
    errors: list[str] = []
    student, teacher = class_contexts(browser, errors)
    try:
        dashboard = signed_in(
            teacher, errors, daphne_server, "teacher_c", f"/classes/{room.pk}/dashboard/"
        )
        now = dashboard.locator("#chain-now")
        expect(now).to_have_text("Now: no chain; 9 sessions on the shared dependency.")
        expect(dashboard.locator("#chain-tiers-help")).to_have_text(
            "2 to 6 tiers; blank: no chain."
        )

        # Nine tiers: the browser holds the form back at the field, nothing changes.
        dashboard.fill("#chain-tiers", "9")
        dashboard.click("#chain-submit")
        assert dashboard.locator("#chain-tiers").evaluate("e => e.validity.rangeOverflow")
        dashboard.fill("#chain-tiers", "3")
        dashboard.click("#chain-submit")
        expect(dashboard.locator("#action-result")).to_contain_text(
            "chain set: 3 tiers (3, 3, 3 services); tier 1 runs the traffic"
        )
        expect(now).to_have_text(
            "Now: 3 tiers (3, 3, 3 services); 9 sessions on the shared dependency."
        )
        dashboard.locator("#chain-form").scroll_into_view_if_needed()
        dashboard.locator("#chain-form").screenshot(path=str(ARTIFACTS / "chain-form-1920.png"))

        # The student's journal says where her service is.
        page = signed_in(student, errors, daphne_server, "alice_c", f"/sessions/{session.pk}/")
        expect(page.locator("#journal-rows")).to_contain_text(
            "this service is tier 1 of 3, the front: its calls go through the services of "
            "tiers 2 to 3 before the shared dependency"
        )
        expect(page.locator("#step-prediction-1")).to_contain_text("It depends on your tier.")
        expect(page.locator("#chain-place")).to_have_text(
            "Chain of students: your service is tier 1 of 3, the front: its calls go through "
            "the services of tiers 2 to 3 before the shared dependency."
        )

        # The front tier's bots call through the chain while the dependency is down.
        panel = watch(teacher, errors)
        panel.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(panel.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        panel.select_option("#trigger-kind", "down")
        panel.fill("#trigger-duration_ms", str(TRIGGER_MS))
        panel.click("#trigger-submit")
        expect(panel.locator("#action-result")).to_contain_text("down trigger fired for 120 s")
        off_loop(front_traffic, room=room)
        chain = panel.locator("#storm-chain")
        expect(chain).to_be_visible(timeout=LIVE_TIMEOUT_MS)
        expect(chain.locator("caption")).to_have_text(
            "Chain of students (last 10 complete seconds)"
        )
        leaf = panel.locator("#chain-leaf")
        expect(leaf).to_contain_text("Each user request reached the shared dependency",
                                     timeout=LIVE_TIMEOUT_MS)  # fmt: skip
        time.sleep(11)  # a whole window of steady traffic through the chain
        shown = chain_figures(panel)
        assert [row[:2] for row in shown["rows"]] == [
            ["1 (front)", "3"], ["2", "3"], ["3 (back)", "3"],
        ], shown  # fmt: skip
        for row in shown["rows"]:
            per_call = float(row[4].rstrip("\u00d7"))
            # a call at a window's edge may have its attempts counted in the next second
            assert 2.7 <= per_call <= 3.3, shown
        hits = float(re.search(r"dependency ([\d.]+) times", shown["leaf"]).group(1))
        assert 24 <= hits <= 30, shown
        # The table of students says each one's tier; the back tier's load the dependency.
        expect(panel.locator("#student-rows tr").first).to_contain_text("· tier 3")
        expect(panel.locator(f'#student-rows tr[data-session="{session.pk}"]')).to_contain_text(
            "alice_c · tier 1"
        )
        calls_in = float(shown["rows"][0][2])
        assert 4 <= calls_in <= 8, shown  # two front bots at 3 calls/s

        # Alice's one call at the front: she predicts 27, and is graded from her burst.
        page.fill("#answer-1", "27")
        page.locator("#step-prediction-1 [data-step-predict]").click()
        expect(page.locator("#step-do-1")).to_be_enabled()
        page.click("#step-do-1")
        step = page.locator("#step-prediction-1")
        expect(step.locator("[data-grade]")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
        graded = {
            "grade": step.locator("[data-grade]").get_attribute("data-grade"),
            "observed": step.locator("[data-observed]").inner_text(),
        }
        assert graded == {"grade": "right", "observed": "27"}, (graded, step.inner_text())
        expect(step).to_contain_text("3 x 3 x 3 = 27")
        page.screenshot(path=str(ARTIFACTS / "chain-student-1920.png"))
        panel.screenshot(path=str(ARTIFACTS / "chain-panel-1920.png"))
        if os.environ.get("LAB_UPDATE_README_SCREENSHOT") == "1":  # the README's picture
            shutil.copy(
                ARTIFACTS / "chain-panel-1920.png", ROOT / "docs" / "img" / "chain-panel.png"
            )

        phone = browser.new_context(viewport={"width": 390, "height": 844})
        try:
            small = signed_in(
                phone, errors, daphne_server, "teacher_c", f"/classes/{room.pk}/dashboard/"
            )
            small.locator("#chain-form").scroll_into_view_if_needed()
            expect(small.locator("#chain-tiers")).to_have_value("3")
            small.locator("#chain-form").screenshot(path=str(ARTIFACTS / "chain-form-390.png"))
            assert small.evaluate("document.documentElement.scrollWidth") <= 390
            small.goto(f"{daphne_server}/classes/{room.pk}/storm/")
            expect(small.locator("#chain-leaf")).to_contain_text(
                "reached the shared dependency", timeout=LIVE_TIMEOUT_MS
            )
            assert small.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            small.locator("#storm-chain").screenshot(path=str(ARTIFACTS / "chain-panel-390.png"))
        finally:
            phone.close()
        assert errors == [], errors
    finally:
        student.close()
        teacher.close()
