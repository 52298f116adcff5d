"""The edge on the storm panel, in headless Chromium at 1920x1080 against daphne, a real
Celery worker and Redis.

A small shared dependency (2 servers x 50 ms: 40 attempts/s) and two bot students
(``classroom_simulate``, the naive policy: 4 attempts per call, 3 retries) with steady, even
traffic. What the panel shows is checked, not what the server sent: the chart's stable line
is capacity / (1 + 3) = 10 calls/s beside the capacity line at 40; the load tile's region is
the one the chart's own calls per second put the load in (the mean of its last three complete
seconds), and it is ``stable`` at 2 x 3 = 6 calls/s, ``vulnerable`` at 2 x 8 = 16 and ``over
capacity`` at 3 x 15 = 45. Then the bots change their policy to 2 attempts per call (1
retry): without a reload the line moves to 20 and 16 calls/s is stable again. No console
error, no CSP violation.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.consumers.storm import SESSIONS_EVERY_S
from labs.live import runtime
from labs.models import LabSession
from labs.services import lab as lab_services
from labs.services import shared as shared_services
from labs.services.simulate import classroom_simulate
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_instructor, make_scenario
from tests.e2e.conftest import ARTIFACTS, login
from tests.e2e.test_csp import REPORT_VIOLATIONS
from tests.e2e.test_dashboard import off_loop

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIVE_TIMEOUT_MS = 60_000
SERVERS, SERVICE_MS = 2, 50
CAPACITY = SERVERS * 1000 / SERVICE_MS  # 40 attempts/s
#: A region is waited for this long: a traffic restart, a run's first seconds and the
#: three seconds the load is averaged over, with a wide margin.
REGION_TIMEOUT_MS = 60_000
#: The sessions' list (and so the class's retries) is read every SESSIONS_EVERY_S.
POLICY_TIMEOUT_MS = int((SESSIONS_EVERY_S + 30) * 1000)

#: What the panel shows: the chart's series by their legend's names, the tile and its label.
SHOWN = """() => {
  const storm = window.failureLabStorm;
  const names = storm.chartSeries();
  const data = storm.chartData();
  const series = {};
  names.forEach((name, i) => { series[name] = data ? data[i] : []; });
  const tile = document.querySelector('[data-metric="region"]');
  return { series: series, tile: tile.textContent, tone: tile.parentElement.dataset.tone,
           label: document.getElementById('region-label').textContent,
           scrollW: document.documentElement.scrollWidth, width: window.innerWidth };
}"""
WORDS = {"stable": "stable", "vulnerable": "vulnerable", "over_capacity": "over capacity"}


def region_of(load: float, capacity: float, stable: float) -> str:
    """The region as the issue defines it, from the figures the chart draws."""
    if load < stable:
        return "stable"
    return "over_capacity" if load > capacity else "vulnerable"


def wait_for_region(page, words: str, stable: float) -> dict:
    """Wait until the tile says ``words`` with the chart's stable line at ``stable``; return
    what the panel shows then, the tile and the chart read in the same moment."""
    page.wait_for_function(
        """([words, stable]) => {
             const tile = document.querySelector('[data-metric="region"]').textContent;
             const e = window.failureLabStorm.edge();
             return tile === words && e.stable_per_s === stable;
           }""",
        arg=[words, stable],
        timeout=REGION_TIMEOUT_MS,
    )
    return page.evaluate(SHOWN)


def check_shown(shown: dict, retries: int, words: str) -> None:
    """The chart's lines are the capacity and capacity / (1 + retries) at every second drawn,
    and the tile's region is the one the chart's last three seconds of calls are in."""
    stable = CAPACITY / (1 + retries)
    series = shown["series"]
    assert series["capacity"] and set(series["capacity"]) == {CAPACITY}, series["capacity"]
    assert set(series["stable line"]) == {stable}, series["stable line"]
    calls = series["load"][-3:]
    load = sum(calls) / 3
    assert shown["tile"] == words == WORDS[region_of(load, CAPACITY, stable)], (shown, load)
    assert f"stable below {stable:g} calls/s ({retries} retr" in shown["label"], shown["label"]
    assert shown["scrollW"] <= shown["width"]


@pytest.fixture
def edge_class(db):
    lesson = make_scenario("edge", title="Find the edge")
    room = make_classroom("Edge A", join_code="EDGEA001")
    room.scenarios.add(lesson)
    teacher = make_instructor("teacher_e", room)
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"servers": SERVERS, "service_ms": SERVICE_MS}
    )
    runtime.shared_model(room.pk).reset()
    return room


def simulate(room, students: int, rate: int, policy: str = "naive"):
    return off_loop(
        classroom_simulate, classroom=room, students=students, policy=policy, rate=rate,
        duration_s=300, arrivals="even",
    )  # fmt: skip


def test_the_panel_draws_the_stable_line_and_says_the_load_s_region(
    browser, daphne_server, e2e_worker, edge_class
):
    room = edge_class
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.expose_function("__reportCspViolation", lambda text: errors.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        # Two bots at 3 calls/s: 6 calls/s, under the stable line of 10.
        simulation = simulate(room, students=2, rate=3)
        login(page, daphne_server, "teacher_e", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/classes/{room.pk}/storm/")
        expect(page.locator("#storm-status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
        check_shown(wait_for_region(page, "stable", CAPACITY / 4), 3, "stable")
        expect(page.locator("#big-region")).to_have_attribute("data-tone", "good")
        page.screenshot(path=str(ARTIFACTS / "storm-edge-stable.png"))

        # 8 calls/s each: 16 calls/s, between the line and the capacity.
        simulate(room, students=2, rate=8)
        check_shown(wait_for_region(page, "vulnerable", CAPACITY / 4), 3, "vulnerable")
        expect(page.locator("#big-region")).to_have_attribute("data-tone", "warn")
        page.screenshot(path=str(ARTIFACTS / "storm-edge-vulnerable.png"))

        # The bots take 2 attempts per call (1 retry): the line moves up past the load,
        # pushed to the open page.
        for session in LabSession.objects.filter(pk__in=[s.pk for s in simulation.sessions]):
            off_loop(
                lab_services.session_set_policy, session=session, user=session.owner,
                changes={"max_attempts": 2},
            )  # fmt: skip
        page.wait_for_function(
            f"() => window.failureLabStorm.edge().stable_per_s === {CAPACITY / 2}",
            timeout=POLICY_TIMEOUT_MS,
        )
        check_shown(wait_for_region(page, "stable", CAPACITY / 2), 1, "stable")

        # Back to 3 retries, and 3 bots at 15 calls/s: 45 calls/s, over the capacity.
        simulate(room, students=3, rate=15)
        check_shown(wait_for_region(page, "over capacity", CAPACITY / 4), 3, "over capacity")
        expect(page.locator("#big-region")).to_have_attribute("data-tone", "bad")
        page.screenshot(path=str(ARTIFACTS / "storm-edge-over.png"))
        assert errors == []
    finally:
        page.screenshot(path=str(ARTIFACTS / "storm-edge-end.png"))
        context.close()
