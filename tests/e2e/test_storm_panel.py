"""The storm panel in headless Chromium against daphne, a real Celery worker and Redis.

A few bot students (``classroom_simulate``, naive policy) run steady traffic on the class's
shared dependency while the instructor has the storm panel open. The instructor fires a
``down`` trigger from the panel's form: the chart's offered load rises above the capacity
line and its goodput falls, the per-student table fills in, and, once the seconds have
settled, every second the page holds equals the model's counters in Redis. The instructor
stops the class's traffic from the panel. A screenshot of the panel mid-storm is saved to
docs/img/storm-panel.png (the README shows it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from labs.live import runtime
from labs.models import Traffic
from labs.services import shared as shared_services
from labs.services.simulate import classroom_simulate
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    tour_script,
)
from tests.e2e.conftest import ARTIFACTS, login
from tests.e2e.test_csp import REPORT_VIOLATIONS
from tests.e2e.test_dashboard import off_loop
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "img" / "storm-panel.png"
LIVE_TIMEOUT_MS = 60_000
BOTS = 4
RATE = 5
#: Seconds the page's oldest seconds need to settle: the consumer resends the last few
#: seconds every tick, and a second's counters change until its attempts have finished.
SETTLE_S = 10
FIELDS = ("offered", "ok", "error", "shed", "skipped", "timeout", "calls", "calls_ok", "retries")


@pytest.fixture
def storm_class(db):
    scenario = make_scenario("storm", title="The storm", script=tour_script())
    room = make_classroom("Storm A", join_code="STORMA01")
    room.scenarios.add(scenario)
    teacher = make_instructor("teacher_a", room)
    # 2 servers x 50 ms: 40 attempts/s, twice the bots' 20 calls/s.
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"servers": 2, "service_ms": 50}
    )
    runtime.shared_model(room.pk).reset()
    return room


def test_storm_panel_follows_a_trigger_fired_from_it(
    browser, daphne_server, e2e_worker, storm_class
):
    room = storm_class
    off_loop(
        classroom_simulate, classroom=room, students=BOTS, policy="naive", rate=RATE,
        duration_s=60, arrivals="even",
    )  # fmt: skip
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.expose_function("__reportCspViolation", lambda text: errors.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    try:
        login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(page.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        # Full screen at 1920x1080: nothing to scroll.
        assert page.evaluate(
            "() => document.documentElement.scrollHeight <= window.innerHeight"
            " && document.documentElement.scrollWidth <= window.innerWidth"
        )
        # Healthy traffic reaches the chart and the table first.
        page.wait_for_function(
            "() => window.failureLabStorm.points().some(p => p.calls_ok > 0)"
            f" && window.failureLabStorm.tableRows() === {BOTS}",
            timeout=LIVE_TIMEOUT_MS,
        )
        page.wait_for_function(
            "() => window.failureLabStorm.points().filter(p => p.calls_ok > 0).length >= 8",
            timeout=LIVE_TIMEOUT_MS,
        )
        page.select_option("#trigger-kind", "down")
        page.fill("#trigger-duration_ms", "5000")
        page.click("#trigger-submit")
        expect(page.locator("#action-result")).to_contain_text(
            "down trigger fired for 5 s", timeout=LIVE_TIMEOUT_MS
        )
        model = runtime.shared_model(room.pk)
        trigger = model.state()["trigger"]
        assert trigger["kind"] == "down"
        from_s, until_s = trigger["from_us"] / 1e6, trigger["until_us"] / 1e6
        # The storm: offered attempts above the capacity line, goodput down, retries counted.
        page.wait_for_function(
            """([from, until]) => {
                 const storm = window.failureLabStorm;
                 const cap = storm.model().capacity_per_s;
                 const during = storm.points().filter(p => p.second >= from && p.second < until);
                 return during.some(p => p.offered > cap) && during.some(p => p.calls_ok === 0)
                   && storm.students().some(s => s.retry_ratio > 0.1);
               }""",
            arg=[int(from_s), int(until_s)],
            timeout=LIVE_TIMEOUT_MS,
        )
        chart = page.evaluate("() => window.failureLabStorm.chartData()")
        offered, capacity = chart[1], chart[2]
        assert max(offered) > capacity[-1] == model.config.capacity_per_s
        table = page.locator("#student-rows tr")
        expect(table).to_have_count(BOTS)
        shares = page.evaluate("() => window.failureLabStorm.students().map(s => s.share)")
        assert abs(sum(shares) - 1) < 0.02
        headline = page.evaluate("() => window.failureLabStorm.headline()")
        assert headline["amplification"] is not None

        # After the trigger: time to recovery, or "not recovered" counting up.
        page.wait_for_function(
            "() => window.failureLabStorm.headline().recovery !== null", timeout=LIVE_TIMEOUT_MS
        )
        expect(page.locator("#recovery-label")).to_contain_text("recover")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))

        # The chart as an image for slides.
        with page.expect_download() as download:
            page.click("#export-png")
        png = Path(download.value.path()).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
        assert download.value.suggested_filename.endswith(".png")

        # Stop the class's traffic from the panel; let the last seconds settle.
        page.click("#traffic-stop")
        expect(page.locator("#action-result")).to_contain_text(
            f"traffic stopped in {BOTS} sessions", timeout=LIVE_TIMEOUT_MS
        )
        wait_for(
            lambda: (
                not Traffic.objects.filter(
                    session__classroom=room, status__in=Traffic.ACTIVE_STATUSES
                ).exists()
            ),
            60,
            interval=0.2,
            message="the bots' traffic to end",
        )
        time.sleep(SETTLE_S)
        shown = {p["second"]: p for p in page.evaluate("() => window.failureLabStorm.points()")}
        stored = {s.second: s.to_dict() for s in model.counters()}
        newest = max(shown)
        compared = 0
        for second, counters in stored.items():
            if second > newest - SETTLE_S // 2:
                continue
            for name in (*FIELDS, "wasted_us", "waits"):
                assert shown[second][name] == counters[name], (second, name)
            compared += 1
        assert compared >= 8
        assert all(int(from_s) + i in stored for i in range(5))  # the trigger's seconds too
        assert sum(shown[s]["retries"] for s in stored if s in shown) > 0
        assert errors == []  # no CSP violation (uPlot styles via CSSOM), no script error
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "storm-panel-end.png"))
        context.close()
