"""What if and compare in headless Chromium against daphne, a real Celery worker and Redis.

A student runs the first two bursts of the tour (flaky 3 and a burst of 6; down and a burst of
6: attempts [4, 4, 4, 0, 0, 0]), opens burst 2's what-if panel from its row in the burst
history on the lab page (the row appeared without a reload), replays it with failure threshold
1 and sees fewer attempts in the diff table and in the second timeline; each burst has exactly
one what-if link, in the history, which opens it in the same panel, after a reload too. No page breaks the Content-Security-Policy. The compare page's URL, opened in a fresh
browser by someone else, shows the same comparison.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import expect

from labs.models import JournalEvent
from labs.services import lab
from tests.conftest import DEFAULT_PASSWORD, make_classroom, make_scenario, make_student
from tests.e2e.conftest import login
from tests.e2e.test_csp import REPORT_VIOLATIONS
from tests.e2e.test_lab_page import run_burst, set_dependency, wait_burst_done

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tour(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    other_room = make_classroom("Resilience B", join_code="CLASSB02")
    other_room.scenarios.add(scenario)
    alice = make_student("alice", room)
    make_student("bob", other_room)
    return lab.session_open(user=alice, classroom=room, scenario=scenario)


def diff_cells(page, table: str, key: str) -> list[str]:
    return page.eval_on_selector_all(
        f'#{table} tr[data-key="{key}"] td', "cells => cells.map(c => c.textContent.trim())"
    )


def open_whatif(page, link: str, number: int) -> None:
    """Click a what-if link and wait for burst ``number``'s panel under the timeline."""
    page.click(link)
    page.wait_for_selector(f"#whatif #replay-form h2 >> text=burst {number} ran with")
    assert page.inner_text("#whatif .replay-heading").startswith(f"What if burst {number} ")


def history_whatif(number: int) -> str:
    """Burst ``number``'s one what-if link on the lab page: its row in the burst history."""
    return f'#burst-history tr[data-burst="{number}"] a.replay-link'


def test_a_student_replays_burst_2_with_threshold_1_and_shares_a_comparison(
    browser, daphne_server, e2e_worker, tour
):
    session = tour
    context = browser.new_context(viewport={"width": 1280, "height": 1400})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    violations: list[str] = []
    context.expose_function("__reportCspViolation", lambda text: violations.append(text))
    context.add_init_script(REPORT_VIOLATIONS)
    try:
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/sessions/{session.pk}/")
        page.wait_for_selector('#live-status[data-state="live"]')
        set_dependency(page, "flaky", 5, fail_count="3")
        run_burst(page, 6)
        wait_burst_done(page, 1)
        set_dependency(page, "down", 5)
        run_burst(page, 6)
        wait_burst_done(page, 2)

        # Burst 2's link in the history (there without a reload) opens the what-if panel on
        # the lab page itself, under the timeline; the replay writes nothing to the journal.
        rows_before = JournalEvent.objects.filter(session=session).count()
        page.click(history_whatif(2))
        page.wait_for_selector("#whatif #replay-form")
        page.fill("#whatif_breaker_failure_threshold", "1")
        page.click("#run-replay")
        page.wait_for_selector("#replay-diff")
        as_ran, replayed, _ = diff_cells(page, "replay-diff", "attempts")
        assert (int(as_ran), int(replayed)) == (12, 4)
        charts = page.eval_on_selector_all(
            "figure.replay-figure", "fs => fs.map(f => Number(f.dataset.attempts))"
        )
        assert charts == [12, 4]
        # Each chart is drawn in the page (the lab page's timeline): a bar per attempt.
        bars = page.eval_on_selector_all(
            "figure.replay-figure [data-timeline]",
            "boxes => boxes.map(b => b.timelineMarks.filter(m => /tl-(ok|bad)/.test(m.class)).length)",
        )
        assert bars == [12, 4]
        assert page.locator("#replay-rows .journal-row").count() > 0
        assert "breaker" in page.inner_text("#replay-rows").lower()

        assert page.locator("#whatif #replay-diff").count() == 1
        assert JournalEvent.objects.filter(session=session).count() == rows_before

        # A policy out of range: the form shows the range beside the field, the last replay
        # stays; corrected, the panel comes back whole, once, without the error.
        page.fill("#whatif_max_attempts", "9")
        page.click("#run-replay")
        expect(
            page.locator('#replay-form [data-field="max_attempts"] .field-error')
        ).to_contain_text("between 1 and 5")
        assert page.locator("#whatif #replay-diff").count() == 1
        page.fill("#whatif_max_attempts", "3")
        page.click("#run-replay")
        expect(page.locator("#replay-form .field-error")).to_have_count(0)
        expect(page.locator("#whatif #replay-diff")).to_have_count(1)
        assert page.locator("#replay-result").count() == 1
        assert page.locator("#replay-output").count() == 1
        assert "Burst 2" in page.inner_text("#burst-summary")

        # One what-if link per burst, in the history: none on the journal rows, the summary
        # or the timeline. Burst 1's, then burst 2's, into the same panel.
        for number in (1, 2):
            replay = f"/sessions/{session.pk}/bursts/{number}/replay/"
            links = page.eval_on_selector_all(  # the open panel links to its own page too
                f'a[href="{replay}"]', "links => links.filter(a => !a.closest('#whatif')).length"
            )
            assert links == 1
        assert page.locator("#journal-rows a, #burst-summary a, a[href*='/whatif/']").count() == 0
        open_whatif(page, history_whatif(1), 1)
        open_whatif(page, history_whatif(2), 2)
        assert page.locator("#whatif #replay-diff").count() == 0  # a fresh panel

        # After a reload the history (loaded with the lab page) has them still.
        page.reload()
        page.wait_for_selector('#live-status[data-state="live"]')
        open_whatif(page, history_whatif(1), 1)
        assert JournalEvent.objects.filter(session=session).count() == rows_before

        page.goto(f"{daphne_server}/compare/")
        page.select_option("#compare-scenario", "tour")
        page.fill("#compare-seed", "7")
        page.select_option("#compare-a", "defaults")
        page.select_option("#compare-b", "threshold-1")
        with page.expect_navigation():
            page.click("#run-compare")
        shared = page.url
        query = {k: v for k, v in parse_qsl(urlsplit(shared).query) if v}
        assert query == {"scenario": "tour", "seed": "7", "a": "defaults", "b": "threshold-1"}
        mine = diff_cells(page, "compare-diff", "attempts")
        assert int(mine[1]) < int(mine[0])
        assert not errors, errors
        page.wait_for_load_state("networkidle")
        assert violations == [], violations
    finally:
        context.close()

    fresh = browser.new_context()
    other = fresh.new_page()
    try:
        login(other, daphne_server, "bob", DEFAULT_PASSWORD)
        other.goto(shared)
        assert diff_cells(other, "compare-diff", "attempts") == mine
        assert other.locator("figure.replay-figure").count() == 2
    finally:
        fresh.close()
