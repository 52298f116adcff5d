"""The account and back-office pages in real Chromium, at 1920x1080 and 390x844: the login page
states its limits; a roster's one-time password leads to the page choosing one's own; a
browser where a student logged in before logs them in while a classmate's wrong passwords
pause their name, and both pages say so; the
instructor's home counts real students and names the simulated apart; the admin's shared
dependency (list and change form) speaks in people's words with its capacity; a class's member
is chosen by name. Each page is checked for what it shows, for CSP violations and console
errors, and (on the lab's own pages) for horizontal scrolling at 390 px; a screenshot of each
lands in ``artifacts/e2e/accounts-<page>-<width>.png``.
"""

from __future__ import annotations

import re

import pytest

from labs.models import Membership, SharedDependencyConfig
from labs.services.accounts import roster_import
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
    make_user,
    tour_script,
)
from tests.e2e.conftest import ARTIFACTS, PAGE_TIMEOUT_MS, login

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SIZES = [(1920, 1080), (390, 844)]
NEW_PASSWORD = "a-garden-of-forking-paths"
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (event) {
  window.__reportCspViolation([event.violatedDirective, event.blockedURI].join(" | "));
});
"""


@pytest.fixture
def room(db):
    scenario = make_scenario("tour", title="The tour", script=tour_script())
    classroom = make_classroom("Resilience A", join_code="CLASSA01")
    classroom.scenarios.add(scenario)
    make_instructor("teacher_a", classroom)
    make_student("alice", classroom)
    for i in range(3):  # simulated students, as simulate_class makes them
        bot = make_user(f"bot-c{classroom.pk}-{i:03d}")
        Membership.objects.create(user=bot, classroom=classroom, simulated=True)
    SharedDependencyConfig.objects.create(classroom=classroom, servers=8, service_ms=40)
    make_user("ann", first_name="Ann", last_name="Lee")
    return classroom


def open_context(browser, width: int, height: int):
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    problems: list[str] = []
    context.expose_function("__reportCspViolation", lambda text: problems.append(f"CSP: {text}"))
    context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    page.on(
        "console",
        lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    return context, page, problems


def check(page, problems: list[str], name: str, width: int, *, own_page: bool = True) -> None:
    """Screenshot; no CSP violation or console error; no horizontal scroll on a lab page."""
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(200)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"accounts-{name}-{width}.png"), full_page=True)
    assert problems == [], f"{name} at {width}: {problems}"
    if own_page:
        scroll = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert scroll <= 0, f"{name} scrolls sideways by {scroll} px at {width}"


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_login_page_and_a_one_time_password(daphne_server, browser, room, width, height):
    accounts = roster_import(classroom=room, text=f"dana{width},Dana Scully,\n")
    context, page, problems = open_context(browser, width, height)
    try:
        page.goto(f"{daphne_server}/accounts/login/")
        hint = page.locator("p.hint").first.inner_text()
        assert (
            "After 5 wrong passwords for a name from one place, that place waits a minute" in hint
        )
        assert "30 wrong passwords within an hour" in hint
        check(page, problems, "login", width)

        page.fill("#id_username", accounts[0].username)
        page.fill("#id_password", accounts[0].password)
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert page.url.endswith("/accounts/choose-password/")
        assert "one-time password from your instructor is now used up" in page.inner_text("main")
        check(page, problems, "choose-password", width)

        page.goto(f"{daphne_server}/")  # any other page leads back to the choice
        assert page.url.endswith("/accounts/choose-password/")
        page.fill("#id_new_password1", NEW_PASSWORD)
        page.fill("#id_new_password2", NEW_PASSWORD)
        with page.expect_navigation():
            page.click("button:has-text('Save my password')")
        assert page.url == f"{daphne_server}/"
        assert "Your password is set" in page.inner_text("body")

        context.clear_cookies()  # someone else at the keyboard, typing alice's name
        for i in range(5):
            page.goto(f"{daphne_server}/accounts/login/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", f"wrong-{i}")
            with page.expect_navigation():
                page.click("button[type=submit]")
        assert page.locator("h1").inner_text() == "Login paused for this name"
        text = " ".join(page.inner_text("main").split())
        assert "This name had 5 wrong passwords from this place" in text
        # The wait counts down from the last wrong password: "a minute" within a second of it,
        # then "59 seconds" and so on (a loaded machine may take a few seconds to get here).
        wait = re.search(r"Try again in (a minute|(\d+) seconds)[,;.]", text)
        assert wait, text
        assert wait.group(2) is None or 40 <= int(wait.group(2)) < 60, text
        problems[:] = [p for p in problems if "429" not in p]  # the refusal's own status
        check(page, problems, "locked-out", width)
    finally:
        context.close()


KNOWN_COMPUTER = (
    "On a computer where you have logged in before, you can log in even while your name is paused."
)


def submit_login(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.click("button[type=submit]")


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_a_known_computer_logs_in_while_a_classmate_pauses_the_name(
    daphne_server, browser, room, width, height
):
    alices, page, problems = open_context(browser, width, height)
    classmates, other, other_problems = open_context(browser, width, height)
    try:
        page.goto(f"{daphne_server}/accounts/login/")
        hints = " ".join(page.locator("p.hint").all_inner_texts())
        assert KNOWN_COMPUTER in hints
        assert "On any other computer, the pause applies to you too." in hints
        check(page, problems, "login-known-computer", width)

        login(page, daphne_server, "alice", DEFAULT_PASSWORD)  # alice, on her computer
        (device,) = [c for c in alices.cookies() if c["name"] == "fl_device"]
        assert device["httpOnly"] is True
        assert device["sameSite"] == "Lax"
        assert device["path"] == "/accounts/login/"
        with page.expect_navigation():
            page.click("form.inline-form button[type=submit]")  # log out
        assert "/accounts/login/" in page.url

        # A classmate, on another computer behind the same address, types alice's name.
        for i in range(5):
            submit_login(other, daphne_server, "alice", f"wrong-{i}")
        assert other.locator("h1").inner_text() == "Login paused for this name"
        text = " ".join(other.inner_text("main").split())
        assert f"{KNOWN_COMPUTER} On this one, the pause applies." in text
        other_problems[:] = [p for p in other_problems if "429" not in p]
        check(other, other_problems, "locked-out-known-computer", width)
        submit_login(other, daphne_server, "alice", DEFAULT_PASSWORD)  # paused there ...
        assert other.locator("h1").inner_text() == "Login paused for this name"

        login(page, daphne_server, "alice", DEFAULT_PASSWORD)  # ... not on alice's computer
        assert page.url == f"{daphne_server}/"
        assert "alice" in page.inner_text("header")
        check(page, problems, "home-known-computer", width)
    finally:
        alices.close()
        classmates.close()


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_instructor_sees_real_students_counted_and_the_admin_in_peoples_words(
    daphne_server, browser, room, width, height
):
    context, page, problems = open_context(browser, width, height)
    try:
        login(page, daphne_server, "teacher_a", DEFAULT_PASSWORD)
        card = page.locator(".card", has_text="Resilience A").first
        assert "1 student (and 3 simulated)" in card.inner_text()
        check(page, problems, "home", width)

        page.goto(f"{daphne_server}/classes/{room.pk}/dashboard/")
        count = " ".join(page.locator("#simulated-count").inner_text().split())
        assert count == "3 simulated (bot students: not listed, not graded)"
        rows = page.locator("#dash-rows tr").all_inner_texts()
        assert any("alice" in row for row in rows) or not rows
        assert not any("bot-c" in row for row in rows)
        check(page, problems, "dashboard-counts", width)
        page.locator(".dash-counts-section").screenshot(
            path=str(ARTIFACTS / f"accounts-dashboard-counts-line-{width}.png")
        )

        page.goto(f"{daphne_server}/admin/labs/shareddependencyconfig/")
        assert page.locator("h1").inner_text() == "Select shared dependency to change"
        table = page.locator("#result_list").inner_text()  # headers shown in capitals
        assert "SERVICE TIME (MS)" in table.upper() and "200 attempts/s" in table
        check(page, problems, "admin-shared-list", width, own_page=False)

        page.locator("#result_list a", has_text="Resilience A").click()
        form = page.locator("#content").inner_text()
        assert "Longest queue wait (ms)" in form and "200 attempts/s" in form
        page.fill("#id_service_ms", "0")
        with page.expect_navigation():
            page.click("input[name=_save]")
        error = page.locator(".field-service_ms .errorlist").inner_text()
        assert error == "Must be between 1 and 2000 ms (got 0)"
        check(page, problems, "admin-shared-change", width, own_page=False)

        page.goto(f"{daphne_server}/admin/labs/classroom/{room.pk}/change/")
        page.locator(".add-row a").first.click()
        page.locator(".dynamic-memberships .select2-selection").last.click()
        page.locator(".select2-search__field").fill("Lee")
        option = page.locator(".select2-results__option", has_text="Ann Lee (ann)")
        option.wait_for()
        check(page, problems, "admin-member-autocomplete", width, own_page=False)
    finally:
        context.close()
