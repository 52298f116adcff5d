"""The shipped lessons in headless Chromium against daphne, a real Celery worker and Redis:
each session starts from its shipped scenario (scenarios/<name>.json).

The four lessons beyond one dependency: the student changes settings through the page's forms
and runs bursts with its button, and the page shows the figure that makes the lesson's point
(a screenshot each: artifacts/e2e/lesson-*.png). Then every lesson done as a student at a
person's pace with the steps panel's own buttons: read each step, type the prediction by
keyboard, Do it, and the grade agrees with the number the explanation states (at least 10 s of
reading before the bursts of the two lessons with a window; screenshots of their graded step at
1920x1080 and 390x844: artifacts/e2e/paced-*.png); the two timed lessons at script speed too.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from labs.engine import run_scenario
from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, ROOT, login, show_setting
from tests.e2e.test_lab_page import marks_of

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000


def _session(name: str, code: str):
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    scenario = make_scenario(name, title=script.get("title", name), script=script)
    room = make_classroom(f"Lesson {name}", join_code=code)
    room.scenarios.add(scenario)
    student = make_student(f"s{code.lower()}", room)
    return student, lab.session_open(user=student, classroom=room, scenario=scenario)


@pytest.fixture
def open_page(browser, daphne_server, e2e_worker):
    contexts = []

    def opened(name: str, code: str):
        student, session = _session(name, code)
        context = browser.new_context(viewport={"width": 1440, "height": 1600})
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        login(page, daphne_server, student.username, DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        return page, errors

    yield opened
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"lesson-{name}.png"), full_page=True)


def run_burst(page, size: int, concurrency: int, number: int) -> None:
    page.fill("#id_size", str(size))
    page.fill("#id_concurrency", str(concurrency))
    page.click("#run-burst")
    page.wait_for_function(
        """n => { const s = document.getElementById('burst-summary');
                  return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
        arg=number,
        timeout=BURST_TIMEOUT_MS,
    )


def save_policy(page, **fields: str) -> None:
    for name, value in fields.items():
        selector = f"#id_{name}"
        show_setting(page, selector)
        if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)
    page.click("#save-policy")
    page.wait_for_function(
        "() => document.querySelector('#policy-form .form-message').textContent"
        ".includes('Policy saved')"
    )


def stat(page, name: str) -> str:
    return page.inner_text(f'#burst-summary [data-stat="{name}"]').strip()


def dependency_row(page, name: str) -> list[str]:
    return page.eval_on_selector_all(
        f'#burst-summary tr[data-dependency="{name}"] td', "cells => cells.map(c => c.textContent)"
    )


def panel_markup(page) -> str:
    """The burst summary panel's markup as the page holds it, whitespace between tags aside."""
    html = page.eval_on_selector("#burst-summary", "e => e.outerHTML")
    return re.sub(r">\s+<", "><", re.sub(r"\s+", " ", html)).strip()


def assert_panel_as_reloaded(page) -> None:
    """The panel the page's script filled in from the push is the one the server renders for
    the same burst when the page is loaded again: same parts, same numbers, same words."""
    live = panel_markup(page)
    page.reload()
    page.wait_for_selector('#live-status[data-state="live"]')
    assert panel_markup(page) == live


def test_per_host_breakers_isolate_the_host_that_is_down(open_page):
    page, errors = open_page("per_host_breakers", "HOSTS001")
    save_policy(page, breaker_scope="host")
    run_burst(page, 18, 1, 1)
    assert (stat(page, "succeeded"), stat(page, "failed"), stat(page, "fast_failed")) == (
        "18", "0", "0",
    )  # fmt: skip
    page.wait_for_selector('#breaker-badge li[data-part="h1"][data-state="open"]')
    parts = page.eval_on_selector_all(
        "#breaker-badge li[data-part]", "items => items.map(i => [i.dataset.part, i.dataset.state])"
    )
    assert parts == [["h0", "closed"], ["h1", "open"], ["h2", "closed"]]
    lanes = page.evaluate(f"() => {marks_of('tl-host-axis')}.map(m => m.text)")
    assert lanes == ["host 0", "host 1", "host 2"]
    open_lanes = f"{marks_of('tl-host-band')}.filter(m => m.class.includes('tl-band-open'))"
    assert page.evaluate(f"() => {open_lanes}.length") >= 1
    assert page.locator('.journal-row[data-kind="attempt"] .j-msg', has_text="host 1,").count() > 0
    shot(page, "per-host-breakers")
    assert_panel_as_reloaded(page)
    assert errors == []


def test_a_bulkhead_keeps_a_healthy_while_b_is_slow(open_page):
    page, errors = open_page("bulkhead", "BULK0001")
    run_burst(page, 20, 4, 1)
    assert dependency_row(page, "a")[:2] == ["10", "4"]  # calls, succeeded
    assert stat(page, "pool_timeout") == "12"
    save_policy(page, bulkhead="2")
    run_burst(page, 20, 4, 2)
    assert dependency_row(page, "a")[:2] == ["10", "10"]
    assert stat(page, "rejected_bulkhead") == "8"
    assert page.locator(".journal-row .j-msg", has_text="(the bulkhead); not called").count() == 8
    shot(page, "bulkhead")
    assert_panel_as_reloaded(page)
    # On a phone each dependency's counts are a card of labelled figures, all on the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    table = page.locator('#burst-summary [data-role="by-dependency"]')
    assert table.evaluate("t => t.scrollWidth <= t.clientWidth")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    card = page.eval_on_selector_all(
        '#burst-summary tr[data-dependency="a"] td',
        """cells => cells.map(c => [getComputedStyle(c, '::before').content, c.textContent,
                                    Math.round(c.getBoundingClientRect().left)])""",
    )
    labels = [(content.strip('" '), text) for content, text, _ in card]
    assert labels[:2] == [("Calls", "10"), ("Succeeded", "10")]
    assert labels[-1][0] == "Waited (ms)"
    assert len({left for *_, left in card}) == 2  # two figures a line
    assert errors == []


def test_a_cached_fallback_answers_while_the_dependency_is_down(open_page):
    page, errors = open_page("fallback_cached", "FALLBK01")
    run_burst(page, 4, 1, 1)
    show_setting(page, "#mode-down")
    page.click("#mode-down")
    page.wait_for_selector('#mode-down[aria-pressed="true"]')
    run_burst(page, 6, 1, 2)
    assert (stat(page, "degraded"), stat(page, "failed"), stat(page, "fast_failed")) == (
        "6", "0", "0",
    )  # fmt: skip
    degraded = page.locator('.journal-row.tone-degraded[data-kind="call_result"] .j-msg')
    assert degraded.count() == 6
    assert "answered by the cached answer" in degraded.first.inner_text()
    shot(page, "fallback-cached")
    assert_panel_as_reloaded(page)
    assert errors == []


def test_idempotency_keys_charge_once_per_call(open_page):
    page, errors = open_page("idempotency_keys", "IDEMP001")
    run_burst(page, 6, 1, 1)
    assert page.inner_text('#burst-summary [data-stat="effects"]').split() == ["9", "/", "6"]
    save_policy(page, idempotency_keys="true")
    run_burst(page, 6, 1, 2)
    assert page.inner_text('#burst-summary [data-stat="effects"]').split() == ["6", "/", "6"]
    assert page.locator(".journal-row .j-msg", has_text="charge not applied again").count() == 3
    shot(page, "idempotency-keys")
    assert_panel_as_reloaded(page)
    assert errors == []


# -- every shipped lesson, done as a student at a person's pace --------------------------------

#: Lessons whose graded steps meet a window (a rate limit, a fresh cached answer): a person
#: reads the step and types for at least 10 s before pressing Do it.
TIMED = ("fallback_cached", "rate_limited_retry_after")
#: Each question's explanation states the graded number in these words.
EXPLAINED = {
    ("bulkhead", 1): "Only the 4 calls to A",
    ("bulkhead", 3): "all 10 succeed",
    ("deadline", 1): "3 + 2 + 1 = 6 in all",
    ("fallback_cached", 2): "None: calls 1 to 4 succeed",
    ("fallback_cached", 5): "None: the cached answer is now more than 3.5 s old",
    ("idempotency_keys", 1): "= 9 charges for 6 calls",
    ("idempotency_keys", 3): "exactly one charge per call, 6",
    ("own_server", 1): "3 succeed, and 7 are shed",
    ("own_server", 3): "7 succeed",
    ("per_host_breakers", 5): "three transitions per burst",
    ("per_host_breakers", 12): "No call fails",
    ("rate_limited_retry_after", 3): "they add up to 1485 ms",
    ("retry_budget", 1): "4 + 8 x 1 + 2 = 14",
    ("retry_outside", 1): "5 fast-fails",
    ("rolling_ratio", 1): "calls 7 to 20 are refused: 14",
    ("tour", 1): "4 + 5 = 9",
    ("tour", 3): "3 x 4 = 12",
    ("tour", 6): "its success closes the breaker",
}
#: The shared-dependency lessons need a class's shared model and the instructor's trigger:
#: the storm is tested on the storm panel (test_storm_panel.py), the edge's questions in
#: test_find_the_edge.py, the server's defences in test_server_defences.py, the chain in
#: test_chain_lesson.py, not here.
CLASS_LESSONS = ("storm_lesson", "find_the_edge", "server_defences", "chain_of_students")
PACED = sorted(p.stem for p in (ROOT / "scenarios").glob("*.json") if p.stem not in CLASS_LESSONS)


def _right_answers(name: str) -> dict[int, Any]:
    """Each asking step's right answer (from 1) as the engine observes it in virtual time:
    what the step's explanation says."""
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    out = run_scenario(script)
    seen = {o["step"] + 1: o for o in out["observed"]}
    return {
        i: seen[i][step["ask"]["measure"]]
        for i, step in enumerate(script["steps"], start=1)
        if "ask" in step
    }


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def do_lesson(page, name: str, *, read_s: float, timed_read_s: float) -> list[dict[str, Any]]:
    """Do every step of lesson ``name`` with the steps panel's own buttons, as a student: read
    (``read_s``; ``timed_read_s`` before a timed lesson's bursts), type each prediction into
    its field by keyboard, press Do it, wait for what it does. Returns each graded step's
    answer, observed text, grade and explanation as the page shows them."""
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    answers = _right_answers(name)
    graded = []
    bursts = 0
    for index, step in enumerate(script["steps"], start=1):
        item = page.locator(f'#steps .step[data-step="{index}"]')
        item.scroll_into_view_if_needed()
        started = time.monotonic()
        pause = timed_read_s if ("burst" in step and name in TIMED) else read_s
        if "ask" in step:
            field = page.locator(f"#answer-{index}")
            answer = _number(answers[index])
            if field.evaluate("e => e.tagName") == "SELECT":
                field.select_option(answer)
            else:
                field.click()
                page.keyboard.type(answer, delay=120)
            page.locator(f"#step-prediction-{index} [data-step-predict]").click()
            expect(page.locator(f"#step-do-{index}")).to_be_enabled()
        time.sleep(max(0.0, pause - (time.monotonic() - started)))
        if "wait_ms" in step:
            timer = item.locator("[data-step-wait]")
            timer.click()
            expect(timer).to_have_text("Waited", timeout=step["wait_ms"] + 10_000)
            continue
        item.locator("[data-step-do]").first.click()
        if "burst" not in step:
            expect(page.locator(f"#step-{index}")).to_be_checked()
            continue
        bursts += 1
        page.wait_for_function(
            """n => { const s = document.getElementById('burst-summary');
                      return s.dataset.status === 'done' && s.textContent.includes('Burst ' + n); }""",
            arg=bursts,
            timeout=BURST_TIMEOUT_MS,
        )
        if "ask" in step:
            box = page.locator(f"#step-prediction-{index}")
            expect(box.locator("[data-grade]")).to_be_visible(timeout=BURST_TIMEOUT_MS)
            graded.append(
                {
                    "step": index,
                    "answer": answers[index],
                    "tolerance": step["ask"].get("tolerance", 0),
                    "grade": box.locator("[data-grade]").get_attribute("data-grade"),
                    "observed": box.locator("[data-observed]").inner_text().strip(),
                    "explanation": box.locator(".step-explanation").inner_text(),
                    "missed": box.locator("[data-missed]").count(),
                }
            )
    return graded


def _check_grades(name: str, graded: list[dict[str, Any]]) -> None:
    asked = sorted(i for (lesson, i) in EXPLAINED if lesson == name)
    assert [g["step"] for g in graded] == asked
    for g in graded:
        assert g["grade"] == "right", (name, g)
        assert g["missed"] == 0
        if isinstance(g["answer"], str):  # a breaker state
            assert g["observed"] == g["answer"]
        else:
            assert abs(float(g["observed"]) - g["answer"]) <= g["tolerance"], (name, g)
        assert EXPLAINED[(name, g["step"])] in g["explanation"], (name, g)


def shoot_graded(page, name: str, step: int) -> None:
    """The graded step at a desktop's and a phone's size (artifacts/e2e/paced-*.png)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1920, 1080), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.locator(f"#step-prediction-{step} [data-grade]").evaluate(
            "e => e.scrollIntoView({block: 'start'})"
        )
        page.screenshot(path=str(ARTIFACTS / f"paced-{name}-{width}.png"))


@pytest.mark.parametrize("name", PACED)
def test_each_lesson_at_a_persons_pace_grades_what_its_explanation_says(open_page, name):
    page, errors = open_page(name, f"PACE{PACED.index(name):04d}")
    graded = do_lesson(page, name, read_s=1.0, timed_read_s=10.0)
    _check_grades(name, graded)
    if name in TIMED:
        shoot_graded(page, name, graded[-1]["step"])
    assert errors == []


@pytest.mark.parametrize("name", TIMED)
def test_the_timed_lessons_also_pass_at_script_speed(open_page, name):
    page, errors = open_page(name, f"FAST{TIMED.index(name):04d}")
    _check_grades(name, do_lesson(page, name, read_s=0.0, timed_read_s=0.0))
    assert errors == []


def test_a_step_whose_situation_did_not_happen_says_so_and_runs_again(open_page):
    """The student runs a burst of their own between setting the rate limit and the graded
    step: the limit is used up, so the step grades nothing, says why in words, and runs again
    once step 2 has set the limit afresh."""
    page, errors = open_page("rate_limited_retry_after", "MISSED01")
    page.locator('#steps .step[data-step="1"] [data-step-do]').click()
    page.wait_for_function(
        "() => document.getElementById('burst-summary').dataset.status === 'done'",
        timeout=BURST_TIMEOUT_MS,
    )
    page.locator('#steps .step[data-step="2"] [data-step-do]').click()
    expect(page.locator("#step-2")).to_be_checked()
    run_burst(page, 1, 1, 2)  # a burst of their own: it meets the whole 1.5 s window
    page.locator("#answer-3").click()
    page.keyboard.type("1485", delay=100)
    page.locator("#step-prediction-3 [data-step-predict]").click()
    page.locator("#step-do-3").click()
    missed = page.locator("#step-prediction-3 [data-missed]")
    expect(missed).to_contain_text("Burst 3 graded nothing.", timeout=BURST_TIMEOUT_MS)
    expect(missed).to_contain_text("its rate limit had already run out before this burst")
    expect(page.locator("#step-prediction-3 [data-grade]")).to_have_count(0)
    expect(page.locator("#step-do-3")).to_be_enabled()
    page.set_viewport_size({"width": 1920, "height": 1080})
    missed.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "paced-missed-1920.png"))

    page.locator('#steps .step[data-step="2"] [data-step-do]').click()  # the limit afresh
    page.wait_for_timeout(1000)
    page.locator("#step-do-3").click()
    grade = page.locator("#step-prediction-3 [data-grade]")
    expect(grade).to_have_attribute("data-grade", "right", timeout=BURST_TIMEOUT_MS)
    expect(page.locator("#step-prediction-3 [data-missed]")).to_have_count(0)
    assert errors == []
