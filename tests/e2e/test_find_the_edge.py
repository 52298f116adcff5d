"""The "Find the edge" lesson in headless Chromium against daphne, a real Celery worker and
Redis: a student predicts, the class's load rises, the instructor fires the same down trigger
from the storm panel, and the student's step shows the grade the panel's recovery clock gives.

A small shared dependency (2 servers x 50 ms: 40 attempts/s; the bots' naive policy retries
3 times, so the stable line is 10 calls/s) and two bot students (``classroom_simulate``) with
steady, even traffic. Step 1 at 2 x 2 = 4 calls/s, below the line: the student predicts the
dependency comes back, and after the 8 s trigger the step says so, right, with the seconds
the panel's time-to-recovery tile shows. Step 2 at 2 x 10 = 20 calls/s, above the line: the
student predicts it comes back again; until the 20 s are up the step says it is not graded
yet, then that it was not back within 20 s, wrong, while the panel still counts "not
recovered". What the page shows is checked as text. No console error, no CSP violation.
"""

from __future__ import annotations

import json
import time

import pytest
from playwright.sync_api import expect

from labs.live import runtime
from labs.services import lab
from labs.services import shared as shared_services
from labs.services.simulate import classroom_simulate
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
)
from tests.e2e.conftest import ARTIFACTS, ROOT, login
from tests.e2e.test_csp import REPORT_VIOLATIONS
from tests.e2e.test_dashboard import off_loop

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LESSON = json.loads((ROOT / "scenarios" / "find_the_edge.json").read_text())
WITHIN_S = LESSON["steps"][0]["ask"]["within_s"]
SERVERS, SERVICE_MS = 2, 50
TRIGGER_MS = 8000
LIVE_TIMEOUT_MS = 60_000
#: A recovery below the line is graded within seconds of the trigger's end; the page polls
#: every 2 s after a trigger, every 5 s before one.
RECOVERED_TIMEOUT_MS = (TRIGGER_MS + 20_000) + 15_000
#: Above the line the grade waits for the whole window after the trigger.
LOCKED_TIMEOUT_MS = TRIGGER_MS + WITHIN_S * 1000 + 30_000


def lesson_class(lesson: dict, code: str, suffix: str):
    """A class on the small shared dependency with ``lesson`` assigned, its instructor
    ``teacher_<suffix>`` and a student ``alice_<suffix>`` with the lesson's session open."""
    scenario = make_scenario(lesson["name"], title=lesson["title"], script=lesson)
    room = make_classroom(f"{lesson['title']} {suffix}", join_code=code)
    room.scenarios.add(scenario)
    teacher = make_instructor(f"teacher_{suffix}", room)
    alice = make_student(f"alice_{suffix}", room)
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"servers": SERVERS, "service_ms": SERVICE_MS}
    )
    runtime.shared_model(room.pk).reset()
    session = lab.session_open(user=alice, classroom=room, scenario=scenario)
    return room, session


@pytest.fixture
def edge_class(db):
    return lesson_class(LESSON, "EDGEB001", "f")


def simulate(room, rate: int) -> None:
    off_loop(
        classroom_simulate, classroom=room, students=2, policy="naive", rate=rate,
        duration_s=300, arrivals="even",
    )  # fmt: skip


def wait_steady(room, calls_per_s: int, timeout_s: float = 40) -> None:
    """Wait until the class's last 4 complete seconds each asked about ``calls_per_s`` calls
    (the run's baseline the recovery clock measures against)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seconds = runtime.shared_now(room.pk, back_s=5)["seconds"][:-1]
        calls = [s["calls"] for s in seconds[-4:]]
        if all(abs(c - calls_per_s) <= 2 for c in calls):
            return
        time.sleep(0.5)
    raise AssertionError(f"no steady {calls_per_s} calls/s: {calls}")


def predict(page, step: int, answer: str) -> None:
    """Answer step ``step``'s question and press its Do it (one call, which fixes it)."""
    page.select_option(f"#answer-{step}", answer)
    page.locator(f"#step-prediction-{step} [data-step-predict]").click()
    expect(page.locator(f"#step-do-{step}")).to_be_enabled()
    page.click(f"#step-do-{step}")
    expect(page.locator(f"#step-prediction-{step} [data-pending]")).to_have_text(
        "Not graded yet: waiting for the instructor's trigger. The grade comes from the storm "
        f"panel's recovery clock, {WITHIN_S} s after the trigger ends at the latest."
    )


def fire(panel) -> None:
    panel.select_option("#trigger-kind", "down")
    panel.fill("#trigger-duration_ms", str(TRIGGER_MS))
    panel.click("#trigger-submit")
    expect(panel.locator("#action-result")).to_contain_text(
        f"down trigger fired for {TRIGGER_MS // 1000} s", timeout=LIVE_TIMEOUT_MS
    )


def watch(context, errors: list[str]):
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page


def signed_in(context, errors: list[str], server: str, username: str, path: str):
    """A new watched page of ``context``, logged in as ``username``, at ``path``."""
    page = watch(context, errors)
    login(page, server, username, DEFAULT_PASSWORD)
    page.goto(f"{server}{path}")
    return page


def class_contexts(browser, errors: list[str]):
    """A student's and an instructor's browser at 1920x1080, each reporting CSP violations
    into ``errors``."""
    student = browser.new_context(viewport={"width": 1920, "height": 1080})
    teacher = browser.new_context(viewport={"width": 1920, "height": 1080})
    for context in (student, teacher):
        context.expose_function("__reportCspViolation", lambda text: errors.append(text))
        context.add_init_script(REPORT_VIOLATIONS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return student, teacher


def test_the_class_finds_the_edge_and_the_panel_s_clock_grades_each_prediction(
    browser, daphne_server, e2e_worker, edge_class
):
    room, session = edge_class
    errors: list[str] = []
    student, teacher = class_contexts(browser, errors)
    try:
        panel = watch(teacher, errors)
        login(panel, daphne_server, "teacher_f", DEFAULT_PASSWORD)
        page = signed_in(student, errors, daphne_server, "alice_f", f"/sessions/{session.pk}/")
        step1 = page.locator("#step-prediction-1")
        expect(step1).to_contain_text("Step 1: the class's load is well below the stable line")
        expect(page.locator("#answer-1 option")).to_have_text(
            ["Yes, it comes back", "No, it stays down"]
        )

        # Step 1: 4 calls/s, below the stable line of 10. The student says it comes back.
        simulate(room, rate=2)
        panel.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(panel.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        wait_steady(room, 4)
        predict(page, 1, "yes")
        time.sleep(2)  # a baseline of healthy seconds after the answer
        fire(panel)
        grade = step1.locator("[data-grade]")
        expect(grade).to_have_attribute("data-grade", "right", timeout=RECOVERED_TIMEOUT_MS)
        expect(step1.locator("[data-answer]").first).to_have_text("Yes, it comes back")
        shown = step1.locator("[data-observed]").inner_text()
        assert shown.startswith("yes: back ") and shown.endswith(" s after the trigger ended")
        expect(grade).to_have_text(
            f"The storm panel's recovery clock: {shown} — right.", use_inner_text=True
        )
        # The panel's own tile shows the same seconds.
        seconds = shown.removeprefix("yes: back ").split(" ")[0]
        expect(panel.locator('[data-metric="recovery"]')).to_have_text(f"{seconds} s")
        page.screenshot(path=str(ARTIFACTS / "find-the-edge-recovered.png"))

        # Step 2: 20 calls/s, twice the stable line. The student says it comes back again.
        simulate(room, rate=10)
        wait_steady(room, 20)
        predict(page, 2, "yes")
        time.sleep(2)
        fire(panel)
        step2 = page.locator("#step-prediction-2")
        expect(step2.locator("[data-pending]")).to_contain_text(
            "Not graded yet: the trigger is running", timeout=TRIGGER_MS
        )
        expect(step2.locator("[data-pending]")).to_contain_text(
            "Not graded yet: the trigger ended", timeout=TRIGGER_MS + 15_000
        )
        expect(step2.locator("[data-pending]")).to_contain_text(
            "and the dependency is not back yet"
        )
        grade = step2.locator("[data-grade]")
        expect(grade).to_have_attribute("data-grade", "wrong", timeout=LOCKED_TIMEOUT_MS)
        expect(grade).to_have_text(
            "The storm panel's recovery clock: no: not back within "
            f"{WITHIN_S} s of the trigger's end — wrong.",
            use_inner_text=True,
        )
        expect(panel.locator("#recovery-label")).to_have_text(
            "not recovered since the trigger ended"
        )
        # Step 1's grade stands beside it.
        expect(step1.locator("[data-grade]")).to_have_attribute("data-grade", "right")
        page.locator("#step-prediction-2").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "find-the-edge-1920.png"))
        panel.screenshot(path=str(ARTIFACTS / "find-the-edge-panel-1920.png"))

        phone = browser.new_context(viewport={"width": 390, "height": 844})
        try:
            small = signed_in(phone, errors, daphne_server, "alice_f", f"/sessions/{session.pk}/")
            expect(small.locator("#step-prediction-2 [data-grade]")).to_have_attribute(
                "data-grade", "wrong"
            )
            small.locator("#step-prediction-2").scroll_into_view_if_needed()
            small.screenshot(path=str(ARTIFACTS / "find-the-edge-390.png"))
            width = small.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, width
        finally:
            phone.close()
        assert errors == [], errors
    finally:
        student.close()
        teacher.close()
