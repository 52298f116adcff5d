"""Lesson mode on the lab page, in headless Chromium against daphne, a real worker and Redis.

The tour (scenarios/tour.json) opened as a student, at 1920x1080 and at 390x844: the page
shows the current step (its text, the settings it changes, what to watch), keeps every other
setting under a closed "All settings", the steps panel is readable with an answer field at
least 8 characters wide, a phone shows the steps first and never scrolls sideways; a burst's
row appears in the history without a reload, with the one "what if" link of that burst. A page
without a lesson shows the settings in their collapsible groups. Screenshots:
artifacts/e2e/lesson-mode-*.png, and the README's (the first screen at either size):
artifacts/e2e/lab-lesson.png and lab-lesson-phone.png, copied to docs/img/ with
``LAB_UPDATE_README_SCREENSHOT=1``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from playwright.sync_api import expect

from labs.services import lab
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_scenario,
    make_student,
    tour_script,
)
from tests.e2e.conftest import ARTIFACTS, ROOT, login
from tests.e2e.test_csp import REPORT_VIOLATIONS

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000
DESKTOP = {"width": 1920, "height": 1080}
PHONE = {"width": 390, "height": 844}

#: The rendered width of an element in characters of its own font ("0"s, as CSS's ``ch``).
WIDTH_IN_CH = """el => {
  const probe = document.createElement("span");
  probe.textContent = "0000000000";
  const style = getComputedStyle(el);
  probe.style.font = style.font;  // a test probe, never part of the page
  probe.style.position = "absolute";
  probe.style.visibility = "hidden";
  document.body.appendChild(probe);
  const ch = probe.getBoundingClientRect().width / 10;
  probe.remove();
  return el.getBoundingClientRect().width / ch;
}"""
SIDEWAYS = "() => document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture
def tour(db):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    instructions = script.pop("instructions")  # the model keeps them, as seed_demo does
    scenario = make_scenario("tour", title="The tour", script=script, instructions=instructions)
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    return room, lab.session_open(user=alice, classroom=room, scenario=scenario)


@pytest.fixture
def watched(browser):
    """Open a logged-in page at a viewport; collects page errors, console errors and CSP
    violations into ``problems``."""
    contexts = []
    problems: list[str] = []

    def opened(base_url: str, viewport: dict, username: str = "alice"):
        context = browser.new_context(viewport=viewport)
        context.set_default_timeout(20_000)
        context.expose_function("__reportCspViolation", lambda t: problems.append(f"CSP: {t}"))
        context.add_init_script(REPORT_VIOLATIONS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None,
        )
        login(page, base_url, username, DEFAULT_PASSWORD)
        return page

    yield opened, problems
    for context in contexts:
        context.close()


def shot(page, name: str, parts: int = 0) -> None:
    """The whole page, and its first ``parts`` screens of 1,400 px (a long phone page is easier
    to read in pieces)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"lesson-mode-{name}.png"), full_page=True)
    width = page.viewport_size["width"]
    height = page.evaluate("document.documentElement.scrollHeight")
    for part in range(parts):
        top = part * 1400
        if top >= height:
            break
        clip = {"x": 0, "y": top, "width": width, "height": min(1400, height - top)}
        path = ARTIFACTS / f"lesson-mode-{name}-{part + 1}.png"
        page.screenshot(path=str(path), full_page=True, clip=clip)


def readme_shot(page, name: str) -> None:
    """The first screen of the page, into artifacts/e2e/ and, with
    ``LAB_UPDATE_README_SCREENSHOT=1``, into docs/img/ for the README (a test run otherwise
    leaves the repository as it was)."""
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(300)  # the scroll and the last push painted
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    if os.environ.get("LAB_UPDATE_README_SCREENSHOT") == "1":
        shutil.copy(ARTIFACTS / name, ROOT / "docs" / "img" / name)


def wait_for_burst(page, number: int) -> None:
    page.wait_for_function(
        """n => { const s = document.getElementById('burst-summary');
                  return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
        arg=number,
        timeout=BURST_TIMEOUT_MS,
    )


def test_a_lesson_shows_its_step_and_keeps_the_rest_closed(
    daphne_server, e2e_worker, tour, watched
):
    _room, session = tour
    opened, problems = watched
    page = opened(daphne_server, DESKTOP)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.__sameDocument = true")

    # The current step (1): its text and what to watch; every setting closed away.
    panel = page.locator('[data-step-panel="1"]')
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("Step 1 of 6:")
    expect(page.locator('#this-step [data-role="lesson-mode"]')).to_have_text("Flaky")
    expect(panel.locator(".step-watch")).to_contain_text("Attempts spent")
    assert page.locator("[data-step-panel]:visible").count() == 1
    assert page.eval_on_selector("#all-settings", "d => d.open") is False
    expect(page.locator("#policy-form #id_max_attempts")).to_be_hidden()
    expect(page.locator("#dependency-form")).to_be_hidden()
    expect(page.locator("#run-burst")).to_be_visible()
    # The lesson's instructions come after its steps, open until the first step is done.
    assert page.eval_on_selector("#lesson-instructions", "d => d.open") is True
    expect(page.locator("#lesson-instructions")).to_contain_text("What to watch.")
    assert (
        page.eval_on_selector(
            "#steps",
            "s => s.compareDocumentPosition(document.getElementById('lesson-instructions'))",
        )
        & 4
    )  # DOCUMENT_POSITION_FOLLOWING

    # The steps panel reads as sentences, its answer field at least 8 characters wide.
    answer = page.locator("#answer-1")
    assert page.eval_on_selector("#answer-1", WIDTH_IN_CH) >= 8
    label_width = page.eval_on_selector(
        '.step[data-step="1"] > label', "l => l.getBoundingClientRect().width"
    )
    assert label_width > 250  # one line of words, not a word per line
    answer.click()
    page.keyboard.type("9")
    page.locator("#step-prediction-1 [data-step-predict]").click()
    expect(page.locator("#step-do-1")).to_be_enabled()
    page.click("#step-do-1")
    wait_for_burst(page, 1)
    expect(page.locator("#step-prediction-1 .step-grade")).to_contain_text("Observed: 9")

    # The history shows burst 1 without a reload, with the burst's one "what if" link.
    expect(page.locator('#burst-history tr[data-burst="1"]')).to_contain_text("done")
    replay = f"/sessions/{session.pk}/bursts/1/replay/"
    assert page.locator(f'a[href="{replay}"]').count() == 1
    assert page.locator('a[href*="/whatif/"], .journal-row a').count() == 0
    assert page.evaluate("window.__sameDocument") is True

    # Step 2 changes the dependency: its panel shows that setting, filled in; applying it
    # sets the dependency and moves the card on to step 3.
    step2 = page.locator('[data-step-panel="2"]')
    expect(step2).to_be_visible()
    expect(step2.locator("#step2_mode")).to_have_value("down")
    # A screenshot leaves an empty style attribute on every input (Playwright hides the caret
    # through it): the swaps below must not copy it back, which the page's CSP would refuse.
    readme_shot(page, "lab-lesson.png")
    step2.get_by_role("button", name="Apply step 2").click()
    expect(page.locator('[data-step-panel="3"]')).to_be_visible()
    expect(page.locator("#dependency-form [data-role=mode]")).to_have_text("Down")
    expect(page.locator('#this-step [data-role="lesson-mode"]')).to_have_text("Down")
    assert page.is_checked("#step-2")
    shot(page, "desktop")

    # Opened again mid-lesson, the steps' column shows the current step (3) at its top.
    page.reload()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator('[data-step-panel="3"]')).to_be_visible()
    aside_top, step_top, aside_bottom = page.evaluate(
        """() => { const a = document.getElementById('lab-aside').getBoundingClientRect();
                   const s = document.querySelector('.step[data-step="3"]').getBoundingClientRect();
                   return [a.top, s.top, a.bottom]; }"""
    )
    assert aside_top <= step_top < aside_top + 100 < aside_bottom

    # All settings opens on a click, its groups inside.
    page.click("#all-settings > summary")
    expect(page.locator("#policy-form #id_max_attempts")).to_be_visible()
    assert page.evaluate(SIDEWAYS) <= 0
    assert problems == []


def test_a_phone_shows_the_steps_first_and_never_scrolls_sideways(
    daphne_server, e2e_worker, tour, watched
):
    _room, session = tour
    opened, problems = watched
    page = opened(daphne_server, PHONE)
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    # One evaluation reads every top: the breaker's card is replaced whenever a push carries it,
    # and a handle taken before such a push measures a detached element (top 0).
    steps_top, *later_tops = page.evaluate(
        """(ids) => ids.map((id) => document.querySelector(id).getBoundingClientRect().top)""",
        ["#steps", "#breaker-badge", "#this-step", "#burst-form", "#all-settings"],
    )
    assert all(steps_top < top for top in later_tops), (steps_top, later_tops)
    assert page.eval_on_selector("#answer-1", WIDTH_IN_CH) >= 8
    assert page.evaluate(SIDEWAYS) <= 0
    page.fill("#answer-1", "9")
    page.locator("#step-prediction-1 [data-step-predict]").click()
    page.click("#step-do-1")
    wait_for_burst(page, 1)
    expect(page.locator('#burst-history tr[data-burst="1"]')).to_contain_text("done")
    expect(page.locator("#step-prediction-1 .step-grade")).to_contain_text("right")
    assert page.evaluate(SIDEWAYS) <= 0
    readme_shot(page, "lab-lesson-phone.png")
    page.click("#all-settings > summary")
    assert page.evaluate(SIDEWAYS) <= 0
    shot(page, "phone", parts=4)
    assert problems == []


def test_without_a_lesson_the_settings_sit_in_collapsible_groups(
    daphne_server, e2e_worker, watched
):
    scenario = make_scenario("free", title="Free play", script=tour_script(name="free", steps=[]))
    room = make_classroom("Free", join_code="FREE0001")
    room.scenarios.add(scenario)
    bob = make_student("bob", room)
    session = lab.session_open(user=bob, classroom=room, scenario=scenario)
    opened, problems = watched
    page = opened(daphne_server, DESKTOP, "bob")
    page.goto(f"{daphne_server}/sessions/{session.pk}/")
    assert page.locator("#this-step, #all-settings").count() == 0
    groups = page.eval_on_selector_all(
        "details.field-group", "ds => ds.map(d => [d.querySelector('summary').textContent, d.open])"
    )
    assert groups == [
        ["Its parameters", True],
        ["Advanced: hosts, side effects, fallbacks, dependency B", False],
        ["Server with a queue: its servers and defences", False],
        ["Retries", True],
        ["Circuit breaker", True],
        ["Retry budget and deadline", True],
        ["Advanced", False],
    ]
    # A group closed by hand stays closed when its form comes back from the server.
    page.click("#policy-group-breaker > summary")
    page.fill("#id_max_attempts", "3")
    page.click("#save-policy")
    expect(page.locator("#policy-form .form-message")).to_contain_text("Policy saved")
    assert page.eval_on_selector("#policy-group-breaker", "d => d.open") is False
    # A refused value inside a closed group opens it, the message beside the field.
    page.click("#policy-group-advanced > summary")
    page.click("#policy-group-advanced > summary")
    page.evaluate("document.getElementById('id_breaker_half_open_calls').value = '500'")
    page.click("#save-policy")
    expect(page.locator("#policy-form .field-error").first).to_contain_text("between 1 and 100")
    assert page.eval_on_selector("#policy-group-advanced", "d => d.open") is True
    page.set_viewport_size(PHONE)
    assert page.evaluate(SIDEWAYS) <= 0
    shot(page, "no-lesson-phone", parts=3)
    # The refused save is answered 422 on purpose: the browser and htmx log that status.
    assert [p for p in problems if "422" not in p] == []


def test_a_click_in_a_second_tab_while_a_burst_runs_says_so(
    daphne_server, e2e_worker, tour, watched
):
    _room, session = tour
    lab.session_set_dependency(
        session=session, user=session.owner, changes={"mode": "slow", "latency_ms": 400}
    )
    opened, problems = watched
    first = opened(daphne_server, DESKTOP)
    second = first.context.new_page()
    second.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    for page in (first, second):
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    first.fill("#id_size", "12")
    first.click("#run-burst")  # 12 calls of 400 ms, one after the other: about 5 s
    expect(second.locator("#burst-summary")).to_have_attribute("data-status", "running")
    second.click("#run-burst")
    message = second.locator("#burst-message")
    expect(message).to_contain_text("A burst is already running in this session")
    expect(message).to_have_class("form-message is-error")
    wait_for_burst(second, 1)
    expect(message).to_have_text(
        "The burst that was running has ended: press Run burst again to run yours."
    )
    assert [p for p in problems if "409" not in p] == []
