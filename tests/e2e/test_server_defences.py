"""The server defends itself, in headless Chromium against daphne, a real Celery worker and
Redis: the instructor turns CoDel on from the class dashboard, the class's load is twice the
stable line, the instructor fires a down trigger from the storm panel, and the dependency
comes back, which grades the student's prediction on "The server defends itself".

A small shared dependency (2 servers x 50 ms: 40 attempts/s; the bots' naive policy retries
3 times, so the stable line is 10 calls/s; without a defence 20 calls/s locks in, as the
Find the edge test shows) and two bot students with steady, even traffic at 2 x 10 calls/s.
What the pages show is checked as text: the form holds back a value out of the field's
range, its confirmation says the defence in words, the panel's load chart draws
the attempts CoDel turned away, the recovery tile and the student's grade agree. At
1920x1080 and 390x844; no console error, no CSP violation.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from labs.live import runtime
from tests.e2e.conftest import ARTIFACTS, ROOT
from tests.e2e.test_find_the_edge import (
    LIVE_TIMEOUT_MS,
    RECOVERED_TIMEOUT_MS,
    class_contexts,
    fire,
    lesson_class,
    predict,
    signed_in,
    simulate,
    wait_steady,
    watch,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LESSON = json.loads((ROOT / "scenarios" / "server_defences.json").read_text())


@pytest.fixture
def defended_class(db):
    return lesson_class(LESSON, "DEFNC001", "d")


def set_codel(dashboard, target: str, interval: str) -> None:
    """Open "The server's defences" as a person does and save a CoDel target and interval."""
    defences = dashboard.locator("#shared-defences")
    if not defences.evaluate("d => d.open"):
        defences.locator("> summary").click()
    dashboard.fill("#shared-codel_target_ms", target)
    dashboard.fill("#shared-codel_interval_ms", interval)
    dashboard.click("#shared-submit")


def test_codel_set_on_the_dashboard_brings_a_locked_in_load_back(
    browser, daphne_server, e2e_worker, defended_class
):
    room, session = defended_class
    errors: list[str] = []
    student, teacher = class_contexts(browser, errors)
    try:
        dashboard = signed_in(
            teacher, errors, daphne_server, "teacher_d", f"/classes/{room.pk}/dashboard/"
        )
        expect(dashboard.locator("#shared-defences > summary")).to_have_text(
            "The server's defences (blank: off)"
        )
        expect(dashboard.locator("#shared-defences")).not_to_have_attribute("open", "")

        # A target out of range: the browser holds the form back at the field (its range is
        # the engine's), and nothing changes.
        set_codel(dashboard, "9000", "100")
        field = dashboard.locator("#shared-codel_target_ms")
        assert field.evaluate("e => e.validity.rangeOverflow && e.max === '5000'")
        expect(dashboard.locator("#shared-codel_target_ms-help")).to_have_text(
            "blank (off) or between 1 and 5000 ms"
        )
        result = dashboard.locator("#action-result")
        assert runtime.shared_model(room.pk).config.codel_target_ms is None
        set_codel(dashboard, "100", "100")
        expect(result).to_contain_text(
            "shared dependency set: 2 servers x 50 ms, queue up to 2000 ms (40 attempts/s); "
            "CoDel sheds a wait over 100 ms once waits stay over it for 100 ms"
        )
        assert runtime.shared_model(room.pk).config.codel_target_ms == 100
        dashboard.locator("#shared-form").scroll_into_view_if_needed()
        dashboard.locator("#shared-form").screenshot(
            path=str(ARTIFACTS / "server-defences-form-1920.png")
        )

        # Twice the stable line: the student predicts step 2 (CoDel) and the trigger fires.
        page = signed_in(student, errors, daphne_server, "alice_d", f"/sessions/{session.pk}/")
        step2 = page.locator("#step-prediction-2")
        expect(step2).to_contain_text("the server sheds long waits (CoDel")
        simulate(room, rate=10)
        panel = watch(teacher, errors)
        panel.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(panel.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        expect(panel.locator("#storm-config")).to_have_text(
            "2 servers \u00d7 50 ms, capacity 40 attempts/s; defends itself: CoDel 100 ms / 100 ms"
        )
        wait_steady(room, 20)
        predict(page, 2, "yes")
        fire(panel)
        grade = step2.locator("[data-grade]")
        expect(grade).to_have_attribute("data-grade", "right", timeout=RECOVERED_TIMEOUT_MS)
        shown = step2.locator("[data-observed]").inner_text()
        assert shown.startswith("yes: back ") and shown.endswith(" s after the trigger ended")
        seconds = shown.removeprefix("yes: back ").split(" ")[0]
        expect(panel.locator('[data-metric="recovery"]')).to_have_text(f"{seconds} s")

        # The load chart drew the attempts CoDel turned away: during the trigger, and none
        # once the retries of its last second are through (the chart drawn until then).
        span = runtime.shared_trigger_span(room.pk)
        after = int(span["until_us"] // 1_000_000) + 2
        panel.wait_for_function(
            "s => Math.max(...window.failureLabStorm.chartData()[0]) >= s",
            arg=after + 1,
            timeout=LIVE_TIMEOUT_MS,
        )
        drawn = panel.evaluate(
            """() => {
                 const storm = window.failureLabStorm;
                 const names = storm.chartSeries(), data = storm.chartData();
                 return { names: names, at: data[0], refused: data[names.indexOf("shed or 429")] };
               }"""
        )
        assert "shed or 429" in drawn["names"], drawn["names"]
        refused = dict(zip(drawn["at"], drawn["refused"], strict=True))
        during = [n for t, n in refused.items() if span["from_us"] // 1_000_000 <= t < after]
        assert max(during) > 0, refused
        assert all(not n for t, n in refused.items() if t >= after), refused
        page.screenshot(path=str(ARTIFACTS / "server-defences-1920.png"))
        panel.screenshot(path=str(ARTIFACTS / "server-defences-panel-1920.png"))

        phone = browser.new_context(viewport={"width": 390, "height": 844})
        try:
            small = signed_in(
                phone, errors, daphne_server, "teacher_d", f"/classes/{room.pk}/dashboard/"
            )
            small.locator("#shared-form").scroll_into_view_if_needed()
            expect(small.locator("#shared-defences")).to_have_attribute("open", "")
            expect(small.locator("#shared-codel_target_ms")).to_have_value("100")
            small.locator("#shared-form").screenshot(
                path=str(ARTIFACTS / "server-defences-form-390.png")
            )
            width = small.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, width
        finally:
            phone.close()
        assert errors == [], errors
    finally:
        student.close()
        teacher.close()
