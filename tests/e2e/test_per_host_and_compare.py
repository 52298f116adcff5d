"""The per-host lesson's breakers and the compare page, in headless Chromium against daphne, a
real Celery worker and Redis.

- The per-host lesson (scenarios/per_host_breakers.json): three bursts with one breaker for
  the whole dependency leave it OPEN; after switching to a breaker per host the badge shows
  each host's breaker and no dependency-wide one, the timeline a lane per host and no
  dependency-wide row, and the host labels do not overlap at 1920x1080 or at 390x844.
- Compare is reached by clicking, from the lab page and from a burst in the burst history;
  "my current policy" against a preset shows two results; the storm lesson is compared on the
  shared dependency's model and says so.
- That comparison's goodput chart is drawn on uPlot with the model's own figures for A and B
  (labs.experiments.metastable.figures_for), its legend reads them second by second under the
  pointer, its canvas shows both policies' colours, and it fits a phone's width.

No page logs a console error or breaks the Content-Security-Policy. Screenshots:
artifacts/e2e/per-host-*.png and compare-*.png.
"""

from __future__ import annotations

import json

import pytest

from labs.engine import merge_settings, parse_policy
from labs.engine.replay import PRESETS
from labs.experiments import metastable
from labs.selectors.replay import SHARED_COMPARE
from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, ROOT, login, show_setting
from tests.e2e.test_csp import REPORT_VIOLATIONS
from tests.e2e.test_lab_page import marks_of

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000
DESKTOP = {"width": 1920, "height": 1080}
PHONE = {"width": 390, "height": 844}


def _scenario(name: str):
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    return make_scenario(name, title=script["title"], script=script)


@pytest.fixture
def watched(browser):
    """A page that records console errors, page errors and CSP violations."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(30_000)
    problems: list[str] = []
    context.expose_function("__reportCspViolation", lambda text: problems.append(f"CSP: {text}"))
    context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    page.on(
        "console",
        lambda msg: problems.append(f"console: {msg.text} ({page.url})")
        if msg.type == "error"
        else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc} ({page.url})"))
    try:
        yield page, problems
    finally:
        context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def run_burst(page, size: int, number: int) -> None:
    page.fill("#id_size", str(size))
    page.fill("#id_concurrency", "1")
    page.click("#run-burst")
    page.wait_for_function(
        """n => { const s = document.getElementById('burst-summary');
                  return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
        arg=number,
        timeout=BURST_TIMEOUT_MS,
    )


def stat(page, name: str) -> str:
    return page.inner_text(f'#burst-summary [data-stat="{name}"]').strip()


def overlapping_labels(page) -> list[str]:
    """The timeline's row labels whose boxes (as drawn: 13 units of type at their baseline,
    as wide as the canvas measures them) intersect."""
    return page.evaluate(
        """() => {
          const labels = document.getElementById('timeline-chart').timelineMarks
            .filter(m => m.class.split(' ').includes('tl-axis'));
          const ctx = document.createElement('canvas').getContext('2d');
          ctx.font = '13px ' + getComputedStyle(document.documentElement).getPropertyValue('--font');
          const boxes = labels.map(l => [l.text, { left: l.x, right: l.x + ctx.measureText(l.text).width,
                                                    top: l.y - 10, bottom: l.y + 3 }]);
          const out = [];
          for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [ta, a] = boxes[i], [tb, b] = boxes[j];
            const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
            const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
            if (w > 0.5 && h > 0.5) out.push(ta + ' / ' + tb);
          }
          return out;
        }"""
    )


def test_per_host_breakers_show_each_hosts_breaker_and_no_stale_global_one(
    daphne_server, e2e_worker, watched
):
    page, problems = watched
    scenario = _scenario("per_host_breakers")
    room = make_classroom("Hosts", join_code="HOSTS002")
    room.scenarios.add(scenario)
    student = make_student("hosts2", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    login(page, daphne_server, student.username, DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    page.wait_for_selector('#live-status[data-state="live"]')

    # One breaker for the dependency: three bursts leave it OPEN (the lesson's first part).
    for number in (1, 2, 3):
        run_burst(page, 6, number)
        page.wait_for_timeout(700)
    assert page.locator("#breaker-badge .breaker-big").count() == 1
    breaker_rows = f"{marks_of('tl-axis')}.filter(m => m.text === 'breaker')"
    assert page.evaluate(f"() => {breaker_rows}.length") == 1

    # A breaker per host: the badge changes at once (pushed after the policy change).
    show_setting(page, "#id_breaker_scope")
    page.select_option("#id_breaker_scope", "host")
    page.click("#save-policy")
    page.wait_for_selector('#breaker-badge[data-scope="host"]')
    for number in (4, 5, 6, 7):
        page.wait_for_timeout(700)
        run_burst(page, 6, number)
        assert (stat(page, "succeeded"), stat(page, "failed"), stat(page, "fast_failed")) == (
            "6", "0", "0",
        )  # fmt: skip

    badge = page.locator("#breaker-badge")
    assert badge.locator("h2").inner_text() == "Circuit breakers, one per host"
    assert badge.locator(".breaker-big").count() == 0  # no dependency-wide breaker
    assert " in 0.0 s" not in badge.inner_text()
    rows = page.eval_on_selector_all(
        "#breaker-badge li[data-part]",
        "items => items.map(i => [i.dataset.part, i.dataset.state,"
        " i.querySelector('[data-role=state]').textContent])",
    )
    assert [r[0] for r in rows] == ["h0", "h1", "h2"]
    assert rows[0][1:] == ["closed", "CLOSED"] and rows[2][1:] == ["closed", "CLOSED"]
    assert (rows[1][1], rows[1][2]) in (("open", "OPEN"), ("half_open", "HALF-OPEN"))

    # The timeline: the last four bursts ran per host, so a lane per host and no
    # dependency-wide row; the "now" tail is each host's state as the badge shows it.
    axis = page.evaluate(f"() => {marks_of('tl-axis')}.map(m => m.text)")
    assert "breaker" not in axis
    assert [a for a in axis if a.startswith("host")] == ["host 0", "host 1", "host 2"]
    now = page.evaluate(f"() => {marks_of('tl-band')}.filter(m => m.now).map(m => m.host)")
    assert now == [0, 1, 2]
    open_lanes = f"{marks_of('tl-host-band')}.filter(m => m.class.includes('tl-band-open'))"
    assert page.evaluate(f"() => {open_lanes}.length") >= 1
    assert page.text_content("#timeline-desc").startswith("Host breakers now: host 0 CLOSED")
    strip = page.evaluate("failureLab.stripDrawn().labels")
    assert strip and "breaker" not in strip
    assert overlapping_labels(page) == []
    shot(page, "per-host-1920")
    page.locator("#breaker-badge").screenshot(path=str(ARTIFACTS / "per-host-badge-1920.png"))
    page.locator(".timeline-card").screenshot(path=str(ARTIFACTS / "per-host-timeline-1920.png"))

    page.set_viewport_size(PHONE)
    page.wait_for_timeout(500)
    assert overlapping_labels(page) == []
    shot(page, "per-host-390")
    page.locator(".timeline-card").screenshot(path=str(ARTIFACTS / "per-host-timeline-390.png"))
    page.wait_for_load_state("networkidle")
    assert problems == []


def test_compare_from_the_lab_page_and_the_history_and_the_storm_on_the_shared_model(
    daphne_server, e2e_worker, watched
):
    page, problems = watched
    tour = make_scenario("tour", title="The tour")
    _scenario("storm_lesson")
    room = make_classroom("Compare", join_code="COMPARE1")
    room.scenarios.add(tour)
    student = make_student("comparer", room)
    session = lab.session_open(user=student, classroom=room, scenario=tour)
    lab.session_set_policy(session=session, user=student, changes={"max_attempts": 1})
    login(page, daphne_server, student.username, DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    page.wait_for_selector('#live-status[data-state="live"]')
    run_burst(page, 6, 1)

    # From the lab page: the lesson and my current policy are filled in.
    with page.expect_navigation():
        page.click("#compare-link")
    assert page.input_value("#compare-scenario") == "tour"
    assert page.input_value("#compare-a") == f"mine:{session.pk}"
    assert not page.locator("#compare-advanced").evaluate("d => d.open")
    page.select_option("#compare-b", "defaults")
    page.fill("#compare-seed", "7")
    with page.expect_navigation():
        page.click("#run-compare")
    cells = page.eval_on_selector_all(
        '#compare-diff tr[data-key="attempts"] td', "cells => cells.map(c => c.textContent)"
    )
    mine, lessons = int(cells[0]), int(cells[1])
    assert mine < lessons  # one attempt per call against the lesson's four
    assert page.locator("figure.replay-figure").count() == 2
    # Both runs drawn by the page's script, a bar per attempt of each.
    bars = page.eval_on_selector_all(
        "figure.replay-figure [data-timeline]",
        "boxes => boxes.map(b => b.timelineMarks.filter(m => /tl-(ok|bad)/.test(m.class)).length)",
    )
    assert bars == [mine, lessons]
    assert "A: My current policy (The tour)." in page.inner_text("#compare-result")
    shot(page, "compare-mine-1920")

    # From a burst in the burst history: its policy is filled in.
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    page.wait_for_selector("#burst-history #compare-burst-1")
    page.locator("#burst-history").screenshot(path=str(ARTIFACTS / "compare-history-1920.png"))
    with page.expect_navigation():
        page.click("#compare-burst-1")
    assert page.input_value("#compare-a").startswith("burst:")
    assert "The policy burst 1 ran with" in page.inner_text("#compare-a")

    # The storm lesson: compared on the shared dependency's model, and the page says so.
    page.select_option("#compare-scenario", "storm_lesson")
    page.select_option("#compare-a", "defaults")
    page.select_option("#compare-b", "retry-budget")
    with page.expect_navigation():
        page.click("#run-compare")
    note = page.inner_text("#compare-shared-note")
    assert "both policies ran on the shared dependency's model" in note
    recovery = page.eval_on_selector_all(
        '#compare-diff tr[data-key="recovery_s"] td', "cells => cells.map(c => c.textContent)"
    )
    assert recovery[0] == "not within the run" and recovery[1].startswith("after ")
    assert page.evaluate("!!document.getElementById('compare-goodput-chart').goodputPlot")
    shot(page, "compare-storm-1920")
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "compare-storm-390")
    page.click("#compare-advanced summary")
    page.locator("#compare-form").screenshot(path=str(ARTIFACTS / "compare-form-390.png"))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.wait_for_load_state("networkidle")
    assert problems == []


def storm_goodput(script: dict, preset: str) -> list[int]:
    """Calls succeeded per second on the shared model, the storm lesson's policy with
    ``preset`` over it, for the class the compare page simulates."""
    params = metastable.MetastableParams(**{**SHARED_COMPARE.__dict__, "seed": script["seed"]})
    policy = parse_policy(merge_settings(script["policy"], PRESETS[preset]))
    return metastable.figures_for(params, policy)["goodput_per_s"]


#: Whether a colour (CSS rgb, as getComputedStyle gives it) was painted in a part of the
#: chart's canvas: a pixel within a small distance of it, in device pixels.
PAINTED = """([box, color, from, to]) => {
  const u = box.goodputPlot;
  const [r, g, b] = color.match(/\\d+/g).map(Number);
  const x0 = Math.round(u.valToPos(from, 'x', true)), x1 = Math.round(u.valToPos(to, 'x', true));
  const pixels = u.ctx.getImageData(x0, u.bbox.top, x1 - x0, u.bbox.height).data;
  for (let i = 0; i < pixels.length; i += 4) {
    if (Math.abs(pixels[i] - r) + Math.abs(pixels[i + 1] - g) + Math.abs(pixels[i + 2] - b) < 40
        && pixels[i + 3] > 200) return true;
  }
  return false;
}"""


def test_the_storm_comparison_draws_each_policys_goodput_on_uplot(daphne_server, watched):
    page, problems = watched
    storm = _scenario("storm_lesson")
    room = make_classroom("Storm compare", join_code="STORMCMP")
    room.scenarios.add(storm)
    student = make_student("stormcomparer", room)
    login(page, daphne_server, student.username, DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/compare/?scenario=storm_lesson&a=defaults&b=retry-budget")
    page.wait_for_function("() => document.getElementById('compare-goodput-chart').goodputPlot")
    box = page.locator("#compare-goodput-chart")

    # The series the chart holds are the model's figures for A and for B, a point a second.
    naive, budget = storm_goodput(storm.script, "defaults"), storm_goodput(storm.script, "retry-budget")
    plot = box.evaluate(
        """b => { const u = b.goodputPlot;
                  return { data: u.data, labels: u.series.map(s => s.label),
                           axes: u.axes.map(a => a.label), x: u.scales.x.min + ',' + u.scales.x.max }; }"""
    )
    assert plot["data"][1] == naive and plot["data"][2] == budget
    assert plot["data"][0] == [s + 0.5 for s in range(60)]
    assert plot["labels"] == ["second", "policy A", "policy B", "healthy rate"]
    assert plot["axes"] == ["seconds into the run", "calls succeeded / s"]
    assert plot["x"] == "0,60"
    # The naive policy never comes back; the budget does within the run.
    assert max(naive[20:]) == 0 and min(budget[20:]) > 100

    # Under the pointer, the legend reads second 30's figures.
    u = "document.getElementById('compare-goodput-chart').goodputPlot"
    box.scroll_into_view_if_needed()
    left = box.evaluate("b => b.goodputPlot.valToPos(30.5, 'x')")
    over = page.locator("#compare-goodput-chart .u-over").bounding_box()
    page.mouse.move(over["x"] + left, over["y"] + over["height"] / 2)
    page.wait_for_function(f"() => {u}.cursor.idx === 30")
    legend = page.eval_on_selector_all(
        "#compare-goodput-chart .u-legend .u-series",
        "rows => rows.map(r => [r.querySelector('.u-label').textContent,"
        " r.querySelector('.u-value').textContent])",
    )
    assert legend == [["second", "30\u201331 s"], ["policy A", str(naive[30])],
                      ["policy B", str(budget[30])], ["healthy rate", str(round(plot["data"][3][0]))]]  # fmt: skip
    page.mouse.move(0, 0)

    # The canvas shows both lines in their own colours after the trigger, and the band in it.
    colors = box.evaluate(
        """b => { const s = getComputedStyle(b);
                  const rgb = c => { const d = document.createElement('i'); d.style.color = c;
                    document.body.append(d); const v = getComputedStyle(d).color; d.remove(); return v; };
                  return [rgb(s.getPropertyValue('--policy-a')), rgb(s.getPropertyValue('--policy-b'))]; }"""
    )
    handle = box.element_handle()
    assert page.evaluate(PAINTED, [handle, colors[0], 25, 55])
    assert page.evaluate(PAINTED, [handle, colors[1], 25, 55])
    summary = page.inner_text("#compare-goodput-summary")
    assert "Policy A fell to 0 a second and was not back" in summary
    assert box.get_attribute("aria-describedby") == "compare-goodput-summary"
    shot(page, "compare-goodput-1920")

    # A phone: the chart follows its box's width, and nothing scrolls the page sideways.
    page.set_viewport_size(PHONE)
    page.wait_for_function(f"() => {u}.width === {u}.root.parentNode.clientWidth")
    assert box.evaluate("b => b.goodputPlot.width") < PHONE["width"]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box.screenshot(path=str(ARTIFACTS / "compare-goodput-390.png"))
    page.wait_for_load_state("networkidle")
    assert problems == []
