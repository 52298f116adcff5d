"""Predict, run, check in headless Chromium against daphne, a real worker and Redis: the
student answers the tour's question before its step, Do it runs the step, the step shows the
answer beside what the journal observed; the instructor's histogram and the class dashboard's
step / score column pick the answer and the grade up while both pages stay open (pushed over
the class websocket: neither page reloads or polls); a reload and another browser keep it
(ticks included); the server refuses a changed answer after the run."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from labs.models import Prediction
from labs.services import lab
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
)
from tests.e2e.conftest import ROOT, login
from tests.e2e.test_csp import REPORT_VIOLATIONS

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000


@pytest.fixture
def room(db):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    scenario = make_scenario("tour", title="The tour", script=script)
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    make_instructor("teacher", room)
    session = lab.session_open(user=alice, classroom=room, scenario=scenario)
    lab.session_set_dependency(session=session, user=alice, changes={"mode": "down"})
    return room, session


def test_answer_run_grade_live_histogram_reload_and_409(browser, daphne_server, e2e_worker, room):
    classroom, session = room
    teacher = browser.new_context(viewport={"width": 1280, "height": 900})
    student = browser.new_context(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    teacher.expose_function("__reportCspViolation", lambda text: problems.append(f"CSP: {text}"))
    teacher.add_init_script(REPORT_VIOLATIONS)
    polls: list[str] = []
    try:
        board = teacher.new_page()
        login(board, daphne_server, "teacher", DEFAULT_PASSWORD)
        board.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        board.goto(f"{daphne_server}/classes/{classroom.pk}/predictions/")
        expect(board.locator("#prediction-histograms")).to_contain_text("No student has answered")
        expect(board.locator("#live-status")).to_have_attribute("data-state", "live")
        dash = teacher.new_page()
        dash.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        dash.goto(f"{daphne_server}/classes/{classroom.pk}/dashboard/")
        progress = dash.locator(f'#row-{session.pk} [data-field="progress"]')
        expect(progress).to_have_text("0/6 steps · 0/0 right")
        expect(dash.locator("#live-status")).to_have_attribute("data-state", "live")
        # From here on, neither page loads anything again: a marker set now would vanish with a
        # reload, and any request for the predictions page would be a poll.
        for watched in (board, dash):
            watched.evaluate("window.__sameDocument = true")
            watched.on("request", lambda r: polls.append(r.url) if "/predictions" in r.url else None)

        page = student.new_page()
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        step = page.locator("#step-prediction-3")
        expect(step).to_contain_text("How many attempts reach it during these 6 calls?")
        expect(page.locator("#step-do-3")).to_be_disabled()

        page.fill("#answer-3", "lots")
        page.locator("#step-prediction-3 [data-step-predict]").click()
        expect(step.locator(".field-error")).to_contain_text("between 0 and 100")
        expect(page.locator("#step-do-3")).to_be_disabled()

        page.fill("#answer-3", "24")
        page.locator("#step-prediction-3 [data-step-predict]").click()
        expect(page.locator("#step-do-3")).to_be_enabled()
        # The instructor's pages, open all along, count the answer.
        expect(board.locator('tr[data-answer="24"] [data-count]')).to_have_text("1", timeout=15_000)
        expect(board.locator(f'tr[data-session="{session.pk}"] [data-score]')).to_have_text("0 of 1")
        expect(progress).to_have_text("0/6 steps · 0/1 right", timeout=15_000)

        page.click("#step-do-3")
        grade = step.locator("[data-grade]")
        expect(grade).to_have_attribute("data-grade", "wrong", timeout=BURST_TIMEOUT_MS)
        expect(step.locator("[data-observed]")).to_have_text("12")
        expect(step).to_contain_text("3 x 4 = 12")
        expect(board.locator('tr[data-observed="12"]')).to_be_visible(timeout=15_000)
        expect(board.locator("[data-question] [data-graded]")).to_have_text("1")
        # Do it ticked the step; the grade (wrong) is in: the dashboard row says so, live.
        expect(progress).to_have_text("1/6 steps · 0/1 right", timeout=15_000)
        assert board.evaluate("window.__sameDocument === true")
        assert dash.evaluate("window.__sameDocument === true")
        assert board.evaluate("window.failureLabPredictions.stats.updates") >= 2
        assert dash.evaluate("window.failureLabDashboard.stats.progressMessages") >= 2
        assert polls == [], polls
        assert problems == [], problems

        page.reload()
        expect(page.locator("#step-prediction-3 [data-grade]")).to_have_attribute(
            "data-grade", "wrong"
        )
        expect(page.locator("#step-prediction-3 [data-answer]")).to_have_text("24")
        expect(page.locator("#answer-3")).to_have_count(0)

        expect(page.locator("#step-3")).to_be_checked()  # Do it ticked it, on the server

        # Another browser of the same student sees the same progress.
        elsewhere = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            other = elsewhere.new_page()
            login(other, daphne_server, "alice", DEFAULT_PASSWORD)
            other.goto(f"{daphne_server}/sessions/{session.pk}/")
            expect(other.locator("#step-3")).to_be_checked()
            expect(other.locator("#step-prediction-3 [data-grade]")).to_have_attribute(
                "data-grade", "wrong"
            )
        finally:
            elsewhere.close()

        token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
        refused = page.request.post(
            f"{daphne_server}/sessions/{session.pk}/steps/3/prediction/",
            form={"answer": "12", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{daphne_server}/sessions/{session.pk}/"},
        )
        assert refused.status == 409
        assert Prediction.objects.get(session=session, step=3).answer == "24"
    finally:
        student.close()
        teacher.close()
