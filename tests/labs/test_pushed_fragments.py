"""What a push carries beside its rows, built in Python, against what the page renders first
with its template partials: the burst summary panel (``presenters.summary_html`` against
``burst-summary``) and the breaker badge (``presenters.badge_html`` against ``breaker-badge``),
the same markup for every part each can show."""

from __future__ import annotations

import re

import pytest

from labs import presenters

FACTS = {"id": 77, "number": 3, "size": 20, "concurrency": 1, "error": "", "recorded": True}
COUNTS = {
    "calls": 20, "succeeded": 14, "failed": 5, "fast_failed": 1, "attempts_total": 28,
    "backoff_ms_total": 123.5, "wall_ms": 310.25,
}  # fmt: skip


def same_markup(html: str) -> str:
    """``html`` with every run of whitespace next to a tag removed and the rest collapsed:
    the template's indentation is not markup."""
    return re.sub(r"\s*([<>])\s*", r"\1", re.sub(r"\s+", " ", html)).strip()


PANELS = {
    "queued": presenters.summary_panel(FACTS, status="queued", error=""),
    "running": presenters.summary_panel(FACTS, status="running", error=""),
    "done": presenters.summary_panel(FACTS, COUNTS, status="done"),
    "done, two callers, 12.25 ms": presenters.summary_panel(
        {**FACTS, "concurrency": 2}, {**COUNTS, "wall_ms": 12.25, "backoff_ms_total": 0.5},
        status="done",
    ),
    "done, not recorded": presenters.summary_panel(
        {**FACTS, "recorded": False}, COUNTS, status="done"
    ),
    "failed with an error to escape": presenters.summary_panel(
        FACTS, status="failed", error="worker <gone> & \"lost\""
    ),
    "interrupted": presenters.summary_panel(FACTS, COUNTS, status="interrupted"),
    "every extra": presenters.summary_panel(
        FACTS,
        {
            **COUNTS, "degraded": 2, "wait_ms_total": 4.5, "rejected_bulkhead": 1,
            "pool_timeout": 0, "effects": {"applied": 3, "calls": 4},
            "by_dependency": {
                "a": {"calls": 1, "succeeded": 1, "failed": 0, "fast_failed": 0,
                      "degraded": 0, "waited_ms": 2.5},
                "b<x>": {"calls": 2, "succeeded": 0, "failed": 2, "fast_failed": 0,
                         "degraded": 1, "waited_ms": 1001.49},
            },
        },
        status="done",
    ),
    "only a fallback": presenters.summary_panel(FACTS, {**COUNTS, "degraded": 0}, status="done"),
    "effects and nothing applied": presenters.summary_panel(
        FACTS, {**COUNTS, "effects": {"applied": 0, "calls": 6}}, status="done"
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", PANELS)
def test_the_pushed_summary_panel_is_the_templates_markup(name):
    panel = PANELS[name]
    assert same_markup(presenters.summary_html(panel)) == same_markup(
        presenters.render_summary(panel)
    )


def test_a_push_builds_the_panel_without_the_template(monkeypatch):
    """summary_fragment (what the consumer sends) never renders the template partial."""

    def no_template(name):
        raise AssertionError(f"template partial {name} rendered for a push")

    monkeypatch.setattr(presenters, "_partial", no_template)
    html = presenters.summary_fragment({"kind": "burst_end", "data": COUNTS}, FACTS)
    assert 'data-status="done"' in html and ">124<" in same_markup(html)
    assert "Burst 3" in html and "replay/" not in html  # its what-if is in the history


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.5, "1"), (1.5, "2"), (2.5, "3"), (-0.2, "0"), (123.45, "123"), (None, "")],
)
def test_waiting_time_rounds_half_up_as_floatformat_does(value, text):
    assert presenters._float0(value) == text


BASE_BADGE = {
    "state": "closed", "open_until_ms": None, "open_for_ms": None, "server_now_ms": 1764750000123,
    "forced": None, "failure_streak": 2, "threshold": 5, "window_failures": 0,
    "window_successes": 0, "config": {"kind": "consecutive", "cooldown_ms": 1500.0},
}  # fmt: skip
BADGES = {
    "closed": BASE_BADGE,
    "open, counting down": {**BASE_BADGE, "state": "open", "open_until_ms": 1764750001623,
                            "open_for_ms": 1940.0},
    "half-open": {**BASE_BADGE, "state": "half_open"},
    "forced open": {**BASE_BADGE, "state": "open", "forced": "open"},
    "forced closed": {**BASE_BADGE, "forced": "closed"},
    "rolling ratio, 12.25 ms cooldown": {
        **BASE_BADGE, "window_failures": 3, "window_successes": 7,
        "config": {"kind": "rolling_ratio", "cooldown_ms": 12.25},
    },
    "half-open, cooldown over": {**BASE_BADGE, "state": "half_open",
                                 "open_until_ms": 1764750000000, "open_for_ms": 0.0},
    "a breaker per host": {
        **BASE_BADGE, "state": "open", "open_until_ms": 1764750000000, "per_host": True,
        "parts": [
            {"key": "h0", "name": "host 0", "state": "closed", "open_until_ms": None,
             "open_for_ms": None},
            {"key": "h1", "name": "host <1>", "state": "open", "open_until_ms": 1764750001623,
             "open_for_ms": 1500.0},
            {"key": "h2", "name": "host 2", "state": "half_open",
             "open_until_ms": 1764750000000, "open_for_ms": 0.0},
        ],
    },
    "hosts and B": {
        **BASE_BADGE,
        "parts": [
            {"key": "h0", "name": "host 0", "state": "closed"},
            {"key": "h1", "name": "host <1>", "state": "open"},
            {"key": "b", "name": "B", "state": "half_open"},
        ],
    },
}  # fmt: skip


@pytest.mark.parametrize("name", BADGES)
def test_the_pushed_badge_is_the_templates_markup(name):
    view = BADGES[name]
    assert same_markup(presenters.badge_html(view)) == same_markup(presenters.render_badge(view))


def test_a_web_process_sends_frames_without_colouring_autobahns_unlogged_debug_line(monkeypatch):
    """autobahn builds a debug line's arguments for every frame it sends; in the web process
    they are plain text, never click's coloured text (labs.consumers.base)."""
    import autobahn.util
    import click

    import labs.consumers.base  # noqa: F401 - importing it is what the web process does

    def no_colour(*args, **kwargs):
        raise AssertionError("click.style called for a frame")

    monkeypatch.setattr(click, "style", no_colour)
    assert autobahn.util.hlval(42) == "42"
    assert autobahn.util.hltype(test_the_pushed_badge_is_the_templates_markup).endswith(">")
