"""The compare page's policy edited field by field, in headless Chromium against daphne: open
"Edit policy B field by field", change B's max attempts with the keyboard, press Compare, and
the result shows B's fewer attempts (A unchanged); the address holds the edit alone. No
console error or CSP violation; nothing scrolls sideways at 390x844. Screenshots:
artifacts/e2e/compare-edit-*.png.
"""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import ARTIFACTS, login
from tests.e2e.test_per_host_and_compare import PHONE, shot, watched  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def attempts(page) -> tuple[int, int]:
    cells = page.eval_on_selector_all(
        '#compare-diff tr[data-key="attempts"] td', "cells => cells.map(c => c.textContent)"
    )
    return int(cells[0]), int(cells[1])


def test_policy_b_edited_field_by_field_changes_what_the_page_shows(
    daphne_server,
    watched,  # noqa: F811
):
    page, problems = watched
    tour = make_scenario("tour", title="The tour")
    room = make_classroom("Edit", join_code="EDITCMP1")
    room.scenarios.add(tour)
    student = make_student("editor", room)
    login(page, daphne_server, student.username, DEFAULT_PASSWORD)
    page.goto(f"{daphne_server}/compare/?scenario=tour&seed=7&a=defaults&b=defaults")
    a_before, b_before = attempts(page)
    assert a_before == b_before  # the same policy twice
    edit = page.locator("#compare-edit-b")
    assert not edit.evaluate("d => d.open")

    # By keyboard: open B's form, set its max attempts to 1, press Compare.
    page.focus("#compare-edit-b > summary")
    page.keyboard.press("Enter")
    assert edit.evaluate("d => d.open")
    assert page.input_value("#id_b-max_attempts") == str(tour.script["policy"]["max_attempts"])
    page.focus("#id_b-max_attempts")
    page.keyboard.press("Control+A")
    page.keyboard.type("1")
    shot(page, "compare-edit-form-1920")
    page.focus("#run-compare")
    with page.expect_navigation():
        page.keyboard.press("Enter")

    a_after, b_after = attempts(page)
    assert a_after == a_before
    assert b_after < a_after  # one attempt per call for B
    shown_b = page.inner_text('#compare-diff tr[data-key="attempts"] td:nth-of-type(2)')
    assert shown_b.strip() == str(b_after) and b_after != b_before
    assert "B: The lesson's own policy, edited: Max attempts per call 1." in page.inner_text(
        "#compare-result"
    )
    assert "b-max_attempts=1" in page.url and "a-max_attempts" not in page.url
    assert edit.evaluate("d => d.open")  # the edit stays in sight
    assert page.input_value("#id_b-max_attempts") == "1"
    assert page.input_value("#id_a-max_attempts") == str(tour.script["policy"]["max_attempts"])
    shot(page, "compare-edit-result-1920")

    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "compare-edit-390")
    page.locator("#compare-form").screenshot(path=str(ARTIFACTS / "compare-edit-form-390.png"))
    page.locator("#compare-result > section").first.screenshot(
        path=str(ARTIFACTS / "compare-edit-diff-390.png")
    )
    page.wait_for_load_state("networkidle")
    assert problems == []
