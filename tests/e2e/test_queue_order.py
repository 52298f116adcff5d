"""The queue order, live, in headless Chromium against daphne, a real Celery worker and Redis:
the instructor picks "newest first (LIFO)" on the class dashboard (refused, in the form's
words, while CoDel is on), the panel's header says it, the class's load is twice the stable
line, a down trigger fires from the storm panel, and the recovery tile shows the class back:
what locks a FIFO server in (the Find the edge test), LIFO escapes, because a freed server
takes a fresh attempt before its caller gives up. At 1920x1080 and 390x844; no console error,
no CSP violation.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from labs.live import runtime
from tests.e2e.conftest import ARTIFACTS
from tests.e2e.test_find_the_edge import (
    LIVE_TIMEOUT_MS,
    RECOVERED_TIMEOUT_MS,
    class_contexts,
    fire,
    lesson_class,
    signed_in,
    simulate,
    wait_steady,
    watch,
)
from tests.e2e.test_server_defences import LESSON

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def open_defences(dashboard) -> None:
    defences = dashboard.locator("#shared-defences")
    if not defences.evaluate("d => d.open"):
        defences.locator("> summary").click()


def test_newest_first_set_on_the_dashboard_brings_a_locked_in_load_back(
    browser, daphne_server, e2e_worker
):
    room, _session = lesson_class(LESSON, "LIFO0001", "q")
    errors: list[str] = []
    student, teacher = class_contexts(browser, errors)
    try:
        dashboard = signed_in(
            teacher, errors, daphne_server, "teacher_q", f"/classes/{room.pk}/dashboard/"
        )
        open_defences(dashboard)
        result = dashboard.locator("#action-result")
        order = dashboard.locator("#shared-discipline")
        expect(order.locator("option:checked")).to_have_text("first come, first served (FIFO)")

        # With CoDel on, newest first is refused in the form's words, and nothing changes.
        dashboard.fill("#shared-codel_target_ms", "100")
        order.select_option("lifo")
        dashboard.click("#shared-submit")
        expect(result).to_contain_text(
            "Queue order: must be fifo (first come, first served) while CoDel is on: it decides "
            "on the wait an attempt has at its arrival, which only a FIFO queue knows then "
            "(got lifo)"
        )
        config = runtime.shared_model(room.pk).config
        assert (config.discipline, config.codel_target_ms) == ("fifo", None)

        open_defences(dashboard)
        dashboard.fill("#shared-codel_target_ms", "")
        dashboard.locator("#shared-discipline").select_option("lifo")
        dashboard.click("#shared-submit")
        expect(result).to_contain_text(
            "shared dependency set: 2 servers x 50 ms, queue up to 2000 ms (40 attempts/s); "
            "a freed server takes the newest waiting attempt (LIFO)"
        )
        assert runtime.shared_model(room.pk).config.discipline == "lifo"
        dashboard.locator("#shared-form").scroll_into_view_if_needed()
        dashboard.locator("#shared-form").screenshot(
            path=str(ARTIFACTS / "queue-order-form-1920.png")
        )

        # Twice the stable line (FIFO locks in there), a down trigger: the class comes back.
        simulate(room, rate=10)
        panel = watch(teacher, errors)
        panel.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(panel.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        expect(panel.locator("#storm-config")).to_have_text(
            "2 servers \u00d7 50 ms, capacity 40 attempts/s; defends itself: newest first (LIFO)"
        )
        wait_steady(room, 20)
        fire(panel)
        recovery = panel.locator('[data-metric="recovery"]')
        expect(recovery).to_have_text(re.compile(r"^\d+(\.\d+)? s$"), timeout=RECOVERED_TIMEOUT_MS)
        panel.screenshot(path=str(ARTIFACTS / "queue-order-panel-1920.png"))

        phone = browser.new_context(viewport={"width": 390, "height": 844})
        try:
            small = signed_in(
                phone, errors, daphne_server, "teacher_q", f"/classes/{room.pk}/dashboard/"
            )
            small.locator("#shared-discipline").scroll_into_view_if_needed()
            expect(small.locator("#shared-discipline option:checked")).to_have_text(
                "newest first (LIFO)"
            )
            small.locator("#shared-form").screenshot(
                path=str(ARTIFACTS / "queue-order-form-390.png")
            )
            width = small.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, width
        finally:
            phone.close()
        # The refused save is answered 422 on purpose: the browser logs that status.
        assert [e for e in errors if "422" not in e] == [], errors
    finally:
        student.close()
        teacher.close()
