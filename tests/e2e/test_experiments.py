"""The Experiments pages in headless Chromium: open each, change a parameter, rerun, and see
the chart change (swapped in by htmx, without a page load); bad input shows its range."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_PASSWORD, make_user
from tests.e2e.conftest import ARTIFACTS as ARTIFACTS_DIR
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: experiment -> (field, new value, an out-of-range value, the message it must show)
CHANGES = {
    "amplification": ("tiers", "4", "0", "tiers: must be between 1 and 6 (got 0)"),
    "storm": ("clients", "100", "100000", "clients: must be between 1 and 1000 (got 100000)"),
    "breaker": (
        "cooldown_ms",
        "1000",
        "-5",
        "cooldown_ms: must be between 100 and 60000 ms (got -5)",
    ),
    "deadline": ("workers", "1", "0", "workers: must be between 1 and 100 (got 0)"),
    "contention": (
        "clients",
        "10,20,50",
        "1",
        "clients: must be 1 to 12 whole numbers separated by commas, each between 2 and 500 (got 1)",
    ),
    "tipping_point": ("retries", "1", "9", "retries: must be between 0 and 5 (got 9)"),
    "queueing": ("workers", "12", "0", "workers: must be between 1 and 64 (got 0)"),
}


def _chart_state(page) -> dict[str, str]:
    return page.evaluate(
        """() => ({
            results: document.querySelector('#results').dataset.checksum,
            chart: document.querySelector('figure.chart').dataset.checksum,
            drawing: [...document.querySelectorAll('figure.chart .series')]
                .map(s => s.getAttribute('points') || s.innerHTML).join('|'),
        })"""
    )


@pytest.mark.parametrize("name", list(CHANGES))
def test_change_a_parameter_rerun_and_the_chart_changes(daphne_server, page, name):
    make_user("erin")
    login(page, daphne_server, "erin", DEFAULT_PASSWORD)
    field, value, bad, message = CHANGES[name]

    page.goto(f"{daphne_server}/experiments/{name}/")
    assert page.locator("figure.chart svg").first.is_visible()
    before = _chart_state(page)
    assert before["results"] and before["chart"] and before["drawing"]
    # Marks this document: it survives an htmx swap, not a page load.
    page.evaluate("window.__sameDocument = true")

    page.fill(f"#id_{field}", value)
    with page.expect_response(
        lambda r: r.url.endswith(f"/experiments/{name}/") and r.request.method == "POST"
    ):
        page.click("#experiment-form button[type=submit]")
    page.wait_for_function(
        "old => document.querySelector('#results').dataset.checksum !== old", arg=before["results"]
    )
    after = _chart_state(page)
    assert after["chart"] != before["chart"]
    assert after["drawing"] != before["drawing"]
    assert page.evaluate("window.__sameDocument === true"), (
        "the form did a full page load, not htmx"
    )
    assert page.input_value(f"#id_{field}") == value

    # Out of range: nothing runs, the message names the field and its range beside it.
    page.fill(f"#id_{field}", bad)
    page.click("#experiment-form button[type=submit]")
    error = page.locator(f"#error_{field}")
    error.wait_for()
    assert error.inner_text() == message
    assert page.locator("#results").get_attribute("data-checksum") == ""
    assert page.locator("figure.chart").count() == 0
    assert "Nothing was run" in page.locator("#results").inner_text()


def test_index_links_every_experiment_from_the_nav(daphne_server, page):
    make_user("frank")
    login(page, daphne_server, "frank", DEFAULT_PASSWORD)
    page.click("nav >> text=Experiments")
    page.wait_for_url(f"{daphne_server}/experiments/")
    for name in CHANGES:
        assert page.locator(f"a[href='/experiments/{name}/']").count() == 1


#: experiment -> words its page must show at the defaults (a figure, a cell of the table)
SHOWN = {
    "tipping_point": ("25.0 % (12.5 calls/s)", "capacity drop, 8 s", "never"),
    "queueing": ("9.7%", "9.91%", "0.8%", "0.79%", "87.0%", "86.74%", "CoDel, spike"),
}


@pytest.mark.parametrize("size", [(1920, 1080), (390, 844)], ids=["desktop", "phone"])
def test_the_new_experiment_pages_show_their_figures_without_scroll_or_errors(
    daphne_server, browser, size
):
    make_user("gwen")
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        login(page, daphne_server, "gwen", DEFAULT_PASSWORD)
        page.goto(f"{daphne_server}/experiments/")
        for name in SHOWN:
            assert page.locator(f"a[href='/experiments/{name}/']").count() == 1
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        for name, words in SHOWN.items():
            page.goto(f"{daphne_server}/experiments/{name}/")
            text = page.locator("main").inner_text()
            for word in words:
                assert word in text, (name, word)
            assert page.locator("figure.chart svg").first.is_visible()
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), name
            ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS_DIR / f"{name}_{size[0]}.png"), full_page=True)
            page.locator("figure.chart").first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS_DIR / f"{name}_{size[0]}_results.png"))
        assert problems == []
    finally:
        context.close()
