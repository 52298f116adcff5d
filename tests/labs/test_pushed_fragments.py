"""What a push carries beside its rows is what the page shows: the breaker badge a consumer
sends is the page's own ``breaker-badge`` section, byte for byte (one template renders both),
and the burst summary's data is what the page renders its ``burst-summary`` from (the page's
script fills it into the same partial: tests/e2e/test_summary_panel.py)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from labs.engine import Breaker, parse_policy
from labs.live import runtime
from labs.models import Burst
from labs.presenters.lab_page import (
    badge,
    burst_facts,
    burst_panel,
    render_badge,
    summary_update,
)
from labs.selectors.lab import breaker_now
from tests.conftest import flush_test_redis
from tests.labs.panels import render_summary

COUNTS = {
    "calls": 20, "succeeded": 14, "failed": 5, "fast_failed": 1, "attempts_total": 28,
    "backoff_ms_total": 123.5, "wall_ms": 310.25, "degraded": 2,
    "effects": {"applied": 3, "calls": 4},
}  # fmt: skip


@pytest.fixture
def session(student, classroom, scenario):
    from labs.services import lab

    flush_test_redis()  # a breaker left under this session id by an earlier test
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


def section(html: str, dom_id: str) -> str:
    """The ``<section id=dom_id>`` element of a page, as the page holds it."""
    found = re.search(rf'<section id="{dom_id}".*?</section>', html, re.S)
    assert found, f"no #{dom_id} on the page"
    return found.group(0)


def without_clock(html: str) -> str:
    """``html`` without the server's clock (read a moment apart by the page and the push)."""
    return re.sub(r'data-server-now-ms="\d*"', "", html)


def page(client, student, session) -> str:
    client.force_login(student)
    response = client.get(reverse("labs:session_detail", args=[session.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_pushed_summary_panel_is_the_pages(client, student, session):
    burst = Burst.objects.create(
        session=session, number=1, size=20, concurrency=2, status=Burst.Status.DONE,
        summary=COUNTS, start_state={"v": 1},
    )  # fmt: skip
    shown = section(page(client, student, session), "burst-summary")
    pushed = summary_update({"kind": "burst_end", "data": COUNTS}, burst_facts(burst))
    assert pushed == burst_panel(burst, [])
    assert pushed["extra"]["degraded"] == 2
    assert pushed["wall_text"] == "Took 310 ms from first call to last answer, 2 callers."
    assert render_summary(pushed) == shown


@pytest.mark.django_db
def test_the_page_holds_a_prototype_panel_with_every_part(client, student, session):
    """The panel a push is filled into is the partial with every part the data may name."""
    html = page(client, student, session)
    found = re.search(r'<template id="burst-summary-prototype">(.*?)</template>', html, re.S)
    assert found
    prototype = found.group(1)
    for part in (
        'data-role="number"', 'data-role="status"', 'data-role="size"',
        'data-extra="degraded"', 'data-extra="wait_ms_total"', 'data-extra="effects"',
        'data-role="by-dependency"', 'data-role="wall"', 'data-role="error"',
    ):  # fmt: skip
        assert part in prototype, part
    assert prototype.count("<tr data-dependency=") == 1


@pytest.mark.django_db
def test_queued_and_started_panels_carry_no_error_and_ends_that_keep_counts_carry_nothing():
    facts = {"id": 1, "number": 1, "size": 3, "concurrency": 1, "status": "failed",
             "error": 'worker <gone> & "lost"', "recorded": True}  # fmt: skip
    queued = summary_update({"kind": "burst_queued"}, facts)
    assert (queued["status"], queued["status_label"], queued["error"]) == ("queued", "queued…", "")
    assert queued["wall_text"] == "" and queued["calls"] == 0
    assert summary_update({"kind": "burst_interrupted"}, facts) is None


@pytest.mark.django_db
@pytest.mark.parametrize("forced", [None, "open"])
def test_the_pushed_badge_is_the_pages(client, student, session, forced):
    if forced:
        policy = parse_policy(session.policy)
        Breaker(
            policy.breaker, store=runtime.session_store(session.pk), clock=runtime.CLOCK
        ).force_open("instructor")
    shown = section(page(client, student, session), "breaker-badge")
    pushed = render_badge(badge(breaker_now(session.pk, session.policy)))
    assert ("held open by hand" in pushed) == bool(forced)
    assert without_clock(pushed) == without_clock(shown)


@pytest.mark.django_db
def test_a_badge_seen_before_is_the_same_render_with_the_new_clock(session):
    """The badge's renders are kept by their view without the clock: a second read of the same
    breaker gives what a fresh render gives, with its own clock; another state renders anew."""
    from labs.presenters import lab_page

    view = badge(breaker_now(session.pk, session.policy))
    first = render_badge({**view, "server_now_ms": 1_000})
    again = render_badge({**view, "server_now_ms": 2_500})
    assert 'data-server-now-ms="1000"' in first and 'data-server-now-ms="2500"' in again
    assert again == first.replace('data-server-now-ms="1000"', 'data-server-now-ms="2500"')
    lab_page._BADGES.clear()
    assert render_badge({**view, "server_now_ms": 2_500}) == again  # as rendered afresh
    other = "open" if view["state"] != "open" else "closed"  # whatever Redis holds now
    changed = render_badge({**view, "state": other, "server_now_ms": 2_500})
    assert f'data-state="{other}"' in changed and changed != again
