"""What if (a finished burst replayed with another policy) and the burst history, over HTTP.

The bursts here are made the way a worker makes them, without the worker: a start state
recorded from the session's settings, the burst run in virtual time from it, its events
journaled and its summary stored (tests/integration/test_replay_worker.py runs real ones).
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from labs.engine.replay import capture_start, replay
from labs.journal import rows
from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import lab
from tests.conftest import flush_test_redis

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FLAKY = {
    "mode": "flaky",
    "fail_count": 20,
    "latency_ms": 5,
    "error": "503",
    "rate": 0.5,
    "down_for_ms": 2000,
    "retry_after_ms": 1000,
    "outcomes": [],
}


@pytest.fixture(autouse=True)
def _fresh_redis():
    flush_test_redis()


@pytest.fixture
def session(student, classroom, scenario) -> LabSession:
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


def finished_burst(session: LabSession, number: int, size: int = 6) -> Burst:
    """A DONE burst with a recorded start state, its journal rows and its summary."""
    start = capture_start(
        dependency=FLAKY,
        policy=session.policy,
        store_state=None,
        now_us=1_700_000_000_000_000,
        rng_seed=f"{session.seed}:{number}",
        size=size,
        concurrency=1,
        first_call=1 + (number - 1) * size,
        burst=number,
    )
    ran = replay(start)
    burst = Burst.objects.create(
        session=session,
        number=number,
        size=size,
        status=Burst.Status.DONE,
        first_call_no=start["first_call"],
        start_state=start,
        summary=ran.summary,
    )
    journal.record(
        [
            journal.entry_from_event(
                e, session_id=session.pk, classroom_id=session.classroom_id, burst_id=burst.pk
            )
            for e in ran.events
        ]
    )
    return burst


def replay_url(session: LabSession, number: int) -> str:
    return reverse("labs:burst_replay", args=[session.pk, number])


def diff_cell(html: str, key: str, column: int) -> str:
    row = re.search(rf'<tr data-key="{key}">(.*?)</tr>', html, re.S).group(1)
    return re.findall(r"<td[^>]*>(.*?)</td>", row)[column]


def test_the_what_if_page_prefills_the_policy_the_burst_ran_with(client, student, session):
    finished_burst(session, 1)
    client.force_login(student)
    page = client.get(replay_url(session, 1))
    assert page.status_code == 200
    html = page.content.decode()
    threshold = session.policy["breaker"]["failure_threshold"]
    assert re.search(rf'name="breaker_failure_threshold"[^>]*value="{threshold}"', html)
    assert 'id="original-rows"' in html and "call 1, attempt 1: 503" in html
    assert 'id="replay-diff"' not in html
    assert "makes the same attempts per call, outcomes and breaker transitions as it did" in html


def test_the_page_says_where_a_replay_differs_from_the_real_burst(client, student, session):
    burst = finished_burst(session, 1)
    row = JournalEvent.objects.filter(burst=burst, kind="call_result", call_no=2).get()
    row.data = dict(row.data, attempts=row.data["attempts"] + 1)
    row.save()
    client.force_login(student)
    html = client.get(replay_url(session, 1)).content.decode()
    assert "call 2 makes" in html and "where the real burst made" in html


def test_a_replay_with_threshold_1_makes_fewer_attempts_and_writes_nothing(
    client, student, session
):
    burst = finished_burst(session, 1)
    client.force_login(student)
    rows_before = JournalEvent.objects.filter(session=session).count()
    redis_before = runtime.session_store(session.pk).export_state()
    policy_before = dict(session.policy)
    answer = client.post(replay_url(session, 1), {"breaker_failure_threshold": "1"}, **HTMX)
    assert answer.status_code == 200
    html = answer.content.decode()
    # Only the replay's output: the form stays on the page as typed.
    assert html.lstrip().startswith('<div id="replay-output"') and 'id="replay-form"' not in html
    as_ran, replayed = int(diff_cell(html, "attempts", 0)), int(diff_cell(html, "attempts", 1))
    assert as_ran == burst.summary["attempts_total"]
    assert replayed < as_ran
    assert 'id="replay-rows"' in html
    # Every replay row keeps its sentence, and the second timeline draws fewer bars.
    replay_rows = html.split('id="replay-rows"')[1]
    assert 'data-kind="transition"' in replay_rows and 'data-kind="call_result"' in replay_rows
    assert html.count('data-attempts="') == 2
    assert JournalEvent.objects.filter(session=session).count() == rows_before
    assert runtime.session_store(session.pk).export_state() == redis_before
    session.refresh_from_db()
    assert session.policy == policy_before


def test_a_policy_out_of_range_is_refused_with_its_range_and_runs_nothing(client, student, session):
    finished_burst(session, 1)
    client.force_login(student)
    answer = client.post(replay_url(session, 1), {"max_attempts": "9"}, **HTMX)
    assert answer.status_code == 422
    html = answer.content.decode()
    assert "Max attempts per call: must be between 1 and 5 (got 9)" in html
    assert 'id="replay-diff"' not in html and 'id="replay-rows"' not in html
    # The form alone, with its errors, swapped in place of the form posted.
    assert html.lstrip().startswith('<form id="replay-form"')
    assert answer["HX-Retarget"] == "#replay-form" and answer["HX-Reswap"] == "outerHTML"
    assert 'name="errors_shown"' in html
    # Still wrong: the form again, in place of the form.
    again = client.post(replay_url(session, 1), {"max_attempts": "0", "errors_shown": "1"}, **HTMX)
    assert again.status_code == 422 and again["HX-Retarget"] == "#replay-form"
    # Corrected, the form that showed errors gets the whole panel back in place of the
    # panel, without them.
    fixed = client.post(replay_url(session, 1), {"max_attempts": "3", "errors_shown": "1"}, **HTMX)
    assert fixed.status_code == 200
    assert fixed["HX-Retarget"] == "#replay-result" and fixed["HX-Reswap"] == "outerHTML"
    html = fixed.content.decode()
    assert html.lstrip().startswith('<div id="replay-result"') and 'id="replay-diff"' in html
    assert "must be between" not in html and 'name="errors_shown"' not in html


def test_another_students_burst_is_404(client, other_student, session):
    finished_burst(session, 1)
    client.force_login(other_student)
    assert client.get(replay_url(session, 1)).status_code == 404
    assert client.post(replay_url(session, 1), {"max_attempts": "1"}).status_code == 404
    history = reverse("labs:burst_history", args=[session.pk])
    assert client.get(history).status_code == 404


def test_a_burst_without_a_start_state_or_not_finished_is_409_and_a_missing_one_404(
    client, student, session
):
    Burst.objects.create(session=session, number=1, size=2, status=Burst.Status.DONE)
    Burst.objects.create(session=session, number=2, size=2, status=Burst.Status.QUEUED)
    client.force_login(student)
    assert client.get(replay_url(session, 1)).status_code == 409
    assert client.get(replay_url(session, 2)).status_code == 409
    assert client.get(replay_url(session, 3)).status_code == 404


def test_the_history_lists_every_burst_paged(client, student, session):
    for number in range(1, 13):
        finished_burst(session, number, size=2)
    client.force_login(student)
    url = reverse("labs:burst_history", args=[session.pk])
    first = client.get(url, **HTMX).content.decode()
    assert first.lstrip().startswith('<section id="burst-history"')
    assert re.findall(r'data-burst="(\d+)"', first) == [str(n) for n in range(12, 2, -1)]
    assert "?page=2" in first and replay_url(session, 12) in first
    second = client.get(url + "?page=2", **HTMX).content.decode()
    assert re.findall(r'data-burst="(\d+)"', second) == ["2", "1"]
    assert client.get(url + "?page=x").status_code == 400
    # The lab page loads it.
    page = client.get(session.get_absolute_url()).content.decode()
    assert f'hx-get="{url}"' in page


def compare_url(**query) -> str:
    from urllib.parse import urlencode

    return reverse("labs:compare") + "?" + urlencode(query)


def test_the_compare_url_holds_the_whole_comparison(client, student, scenario):
    client.force_login(student)
    url = compare_url(scenario=scenario.slug, seed=7, a="defaults", b="threshold-1")
    first = client.get(url)
    assert first.status_code == 200
    html = first.content.decode()
    a, b = int(diff_cell(html, "attempts", 0)), int(diff_cell(html, "attempts", 1))
    assert b < a
    assert html.count('data-attempts="') == 2
    # The same URL, another browser (another user), the same comparison.
    client.logout()
    client.force_login(make_other_user())
    assert diff_cell(client.get(url).content.decode(), "attempts", 1) == str(b)


def make_other_user():
    from tests.conftest import make_user

    return make_user("carol")


@pytest.mark.parametrize(
    "query, message",
    [
        (
            {"scenario": "tour", "b": '{"max_attempts": 9}'},
            # in the words of the field editing it (policy B's max attempts), with its range
            "Policy B, Max attempts per call: must be between 1 and 5 (got 9)",
        ),
        ({"scenario": "tour", "b": '{"max_attempts": 9'}, "b: is not valid JSON"),
        ({"scenario": "tour", "a": "fastest"}, "a: must be a preset (defaults, no-retries"),
        (
            {"scenario": "tour", "seed": "-1"},
            "seed: must be a whole number between 0 and 4294967295",
        ),
        ({"scenario": "nope"}, "scenario: no active scenario &#x27;nope&#x27;"),
        ({"scenario": "tour", "b": "x" * 3000}, "b: at most 2000 characters (got 3000)"),
        ({"dependency": '{"mode": "sideways"}'}, "dependency.mode: must be one of healthy"),
        ({"dependency": "[1]"}, "dependency: must be a JSON object"),
        (
            {"dependency": '{"mode": "down"}', "calls": "21"},
            "calls: must be a whole number between 1 and 20",
        ),
        (
            {"scenario": "tour", "dependency": '{"mode": "down"}'},
            "scenario: give a scenario or a dependency script, not both",
        ),
        ({"seed": "3"}, "scenario: pick one of the scenarios, or give a dependency script"),
    ],
)
def test_a_malformed_or_tampered_comparison_says_what_is_wrong(
    client, student, scenario, query, message
):
    client.force_login(student)
    answer = client.get(compare_url(**query))
    assert answer.status_code == 400
    html = answer.content.decode()
    assert message in html
    assert 'id="compare-diff"' not in html


def test_each_finished_burst_has_one_what_if_link_in_the_history(client, student, session):
    finished_burst(session, 1)
    finished_burst(session, 2)
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    # Neither the summary panel nor a journal row links to a what-if: the history does.
    assert "bursts/2/replay/" not in page and "/whatif/" not in page
    history = client.get(reverse("labs:burst_history", args=[session.pk]), **HTMX)
    html = history.content.decode()
    for number in (1, 2):
        assert html.count(f'href="{replay_url(session, number)}"') == 1


def test_a_dependency_script_against_two_policies(client, student):
    client.force_login(student)
    script = '{"mode": "script", "outcomes": ["fail", "fail", "fail", "fail", "ok"]}'
    answer = client.get(
        compare_url(dependency=script, calls=4, seed=3, a="defaults", b="no-retries")
    )
    assert answer.status_code == 200
    html = answer.content.decode()
    # Defaults (4 attempts): call 1 spends the four failures, calls 2 to 4 succeed at once:
    # 7. No retries: calls 1 to 3 fail once each, the breaker opens (threshold 3) and call 4
    # fails fast: 3.
    assert (diff_cell(html, "attempts", 0), diff_cell(html, "attempts", 1)) == ("7", "3")


def test_the_lab_page_holds_the_what_if_panel_and_the_panel_has_its_own_ids(
    client, student, session
):
    finished_burst(session, 1)
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    assert '<section id="whatif"' in page
    panel = client.get(replay_url(session, 1), **HTMX).content.decode()
    assert panel.lstrip().startswith('<div id="replay-result"')
    # Beside the session's own policy form, no id is used twice.
    assert 'id="whatif_max_attempts"' in panel and 'id="id_max_attempts"' not in panel
    embedded = client.get(reverse("labs:burst_history", args=[session.pk]), **HTMX)
    assert f'hx-get="{replay_url(session, 1)}" hx-target="#whatif"' in embedded.content.decode()
    alone = client.get(reverse("labs:burst_history", args=[session.pk]))
    assert 'hx-target="#whatif"' not in alone.content.decode()


# --- bursts that cannot be replayed (yet) ------------------------------------------------------

NOT_RECORDED = "recorded before replay existed"


def burst_from_before_replay(session: LabSession, number: int = 1) -> Burst:
    """A finished burst as the lab kept it before bursts recorded their start state: a
    summary and journal rows, ``start_state`` empty (what migration 0006 gave old rows)."""
    burst = finished_burst(session, number)
    Burst.objects.filter(pk=burst.pk).update(start_state={})
    burst.refresh_from_db()
    return burst


def whatif_url(burst: Burst) -> str:
    return reverse("labs:burst_whatif", args=[burst.pk])


def test_a_burst_recorded_before_replay_existed_offers_no_what_if(client, student, session):
    burst = burst_from_before_replay(session)
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    summary = page.split('id="burst-summary"')[1].split("</section>")[0]
    assert "bursts/1/replay/" not in summary
    journal_rows = page.split('id="journal-rows"')[1].split("</ol>")[0]
    assert 'data-kind="attempt"' in journal_rows and "j-whatif" not in journal_rows
    history = client.get(reverse("labs:burst_history", args=[session.pk]), **HTMX)
    row = re.search(r'<tr data-burst="1">(.*?)</tr>', history.content.decode(), re.S).group(1)
    assert ">Timeline, journal</a>" in row and "what if" not in row and NOT_RECORDED in row
    # Opened by its URL (either one), the view says why instead of a bare 404, and shows the
    # burst's timeline and journal rows as it ran.
    for address in (replay_url(session, 1), whatif_url(burst)):
        for answer in (client.get(address), client.get(address, **HTMX)):
            assert answer.status_code == 409
            html = answer.content.decode()
            assert f"Burst 1 was {NOT_RECORDED}" in html and 'id="replay-form"' not in html
            assert 'id="replay-timeline-1"' in html and 'id="replay-timeline-2"' not in html
            rows = html.split('id="original-rows"')[1].split("</ol>")[0]
            assert 'data-kind="attempt"' in rows
        posted = client.post(address, {"breaker_failure_threshold": "1"}, **HTMX)
        assert posted.status_code == 409 and 'id="replay-diff"' not in posted.content.decode()


def test_a_running_interrupted_or_failed_burst_says_why_it_has_no_what_if(client, student, session):
    running = Burst.objects.create(session=session, number=1, size=2, status="running")
    client.force_login(student)
    answer = client.get(whatif_url(running), **HTMX)
    assert answer.status_code == 409
    assert "Burst 1 is still running" in answer.content.decode()
    assert 'id="original-rows"' not in answer.content.decode()  # nothing to show yet
    assert client.get(replay_url(session, 1)).status_code == 409
    history = reverse("labs:burst_history", args=[session.pk])
    row = re.compile(r'<tr data-burst="1">(.*?)</tr>', re.S)
    assert "replay-link" not in row.search(client.get(history).content.decode()).group(1)
    journal.record([journal.entry(session, "burst_start", "burst 1 starts", burst_id=running.pk)])
    Burst.objects.filter(pk=running.pk).update(status="interrupted")
    html = client.get(whatif_url(running)).content.decode()
    assert "Burst 1 was interrupted" in html
    # An ended burst keeps its timeline and journal rows, from the history too.
    assert 'id="replay-timeline-1"' in html and "burst 1 starts" in html
    linked = row.search(client.get(history).content.decode()).group(1)
    assert ">Timeline, journal</a>" in linked and "interrupted before it finished" in linked
    Burst.objects.filter(pk=running.pk).update(status="failed")
    assert "Burst 1 stopped on an error" in client.get(whatif_url(running)).content.decode()
    assert client.get(replay_url(session, 2)).status_code == 404


# --- no what-if on journal rows --------------------------------------------------------------


def test_no_journal_row_carries_a_what_if_link(client, student, session):
    burst = finished_burst(session, 1)
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    rows_html = re.findall(r'<li id="ev-\d+"[^>]*data-kind="([a-z_]+)">(.*?)</li>', page, re.S)
    assert rows_html and {kind for kind, _ in rows_html} >= {"attempt", "call_result", "burst_end"}
    assert not [kind for kind, body in rows_html if "<a " in body]
    # The burst's what-if view itself is there, as a panel and as a page.
    panel = client.get(whatif_url(burst), **HTMX)
    assert panel.status_code == 200
    html = panel.content.decode()
    assert html.lstrip().startswith('<div id="replay-result"')
    assert "What if burst 1 had another policy?" in html and 'id="whatif_max_attempts"' in html
    assert 'id="replay-form"' in client.get(whatif_url(burst)).content.decode()


def test_a_pushed_row_carries_no_link_either(session):
    """A pushed row is rendered from the writer's entry (no database read), like a row read
    back: no "what if" link on it."""

    burst = finished_burst(session, 1)
    row = JournalEvent.objects.filter(burst=burst, kind="attempt").first()
    entry = journal.Entry(
        session_id=session.pk, classroom_id=session.classroom_id, kind="attempt",
        message=row.message, burst_id=burst.pk, call_no=row.call_no, attempt_no=row.attempt_no,
        outcome=row.outcome, error=row.error, emitted=1.0,
    )  # fmt: skip
    pushed = journal.entry_payload(journal.Written(entry, row.seq, row.created_at))
    html = str(rows.journal_row(pushed))
    assert row.message in html and "<a " not in html


def test_another_students_burst_by_id_is_404(client, other_student, session):
    burst = finished_burst(session, 1)
    client.force_login(other_student)
    assert client.get(whatif_url(burst)).status_code == 404
    assert client.get(whatif_url(burst), **HTMX).status_code == 404
    assert client.post(whatif_url(burst), {"max_attempts": "1"}).status_code == 404
    assert client.get(reverse("labs:burst_whatif", args=[burst.pk + 99])).status_code == 404


# --- what if from the timeline ---------------------------------------------------------------


def test_the_timeline_knows_each_burst_number_and_which_cannot_be_replayed(
    client, student, session
):
    import json

    finished_burst(session, 1)
    old = burst_from_before_replay(session, 2)
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    events = json.loads(re.search(r'id="chart-events"[^>]*>(.*?)</script>', page, re.S).group(1))
    ends = {e["burst"]: e for e in events if e["kind"] == "burst_end"}
    assert {e["data"]["burst"] for e in ends.values()} == {1, 2}
    assert ends[old.pk]["whatif"] is False
    assert all(e.get("whatif", True) for e in events if e["burst"] != old.pk)


def test_rows_read_back_for_a_reconnecting_socket_are_marked_with_one_query(
    session, django_assert_num_queries
):
    """The consumer's catch-up (``rows_after``) marks the rows of a burst that can never be
    replayed (the timeline reads the mark), for one query more per chunk, whatever its
    length."""
    from labs.selectors.lab import rows_after

    new = finished_burst(session, 1)
    old = burst_from_before_replay(session, 2)
    failed = Burst.objects.create(session=session, number=3, size=1, status="failed")
    journal.record([journal.entry(session, "burst_failed", "stopped", burst_id=failed.pk)])
    with django_assert_num_queries(2):
        read_back = rows_after(session.pk, 0, 500)
    assert new.pk in {r["burst"] for r in read_back if r.get("whatif", True)}
    assert {r["burst"] for r in read_back if r.get("whatif") is False} == {old.pk, failed.pk}


def test_the_pushed_summary_panel_has_no_what_if_link(session):
    """The consumer renders the panel at a burst's end from facts it learnt from the
    ``burst_queued`` row or read by id; the burst's what-if link is in the history, not here."""
    from labs.presenters.lab_page import summary_update
    from labs.selectors.lab import burst_facts_by_id
    from tests.labs.panels import render_summary

    new = finished_burst(session, 1)
    old = burst_from_before_replay(session, 2)
    facts = burst_facts_by_id([new.pk, old.pk])
    assert (facts[new.pk]["recorded"], facts[old.pk]["recorded"]) == (True, False)
    for burst in (new, old):
        end = JournalEvent.objects.get(burst=burst, kind="burst_end")
        html = render_summary(summary_update(journal.event_payload(end), facts[burst.pk]))
        assert f'data-role="number">{burst.number}<' in html and "replay/" not in html and "<a " not in html


def test_replay_rows_rendered_in_python_match_the_template_markup_and_charts_are_data():
    """The what-if's rows are built in Python (a template partial per row was most of the
    answer's time): the same markup a template would give, values escaped. Its timelines are
    data for the page's script, which draws the lab page's timeline from them."""
    from django.template import Context, Template

    from labs.presenters.replay import replay_rows_html, replay_timelines

    rows = [
        {"n": 1, "kind": "attempt", "kind_label": "attempt", "tone": "bad", "t_ms": 12.5,
         "message": "call 1 <b>& 'x'</b> failed"},
        {"n": 2, "kind": "call_result", "kind_label": "result", "tone": "ok", "t_ms": 0.0,
         "message": "ok"},
    ]  # fmt: skip
    template = Template(
        '{% for r in rows %}<li class="journal-row tone-{{ r.tone }}" data-kind="{{ r.kind }}">'
        '<span class="j-time">+{{ r.t_ms }} ms</span> <span class="j-kind">{{ r.kind_label }}'
        '</span> <span class="j-msg">{{ r.message }}</span></li>{% endfor %}'
    )
    assert replay_rows_html(rows) == template.render(Context({"rows": rows}))
    assert "<b>" not in replay_rows_html(rows)

    start = capture_start(
        dependency=dict(FLAKY, fail_count=2), policy={"max_attempts": 3},
        store_state=None, now_us=1_700_000_000_000_000, rng_seed="7:1", size=3,
        concurrency=1, first_call=1, burst=1,
    )  # fmt: skip
    events = replay(start).events
    (chart,) = replay_timelines([("a <title>", [e.to_dict() for e in events])])
    # The chart's data, drawn by the page's script: what it reads of each event, ``t`` in ms
    # from the burst's start.
    drawn = chart["events"]
    assert chart["attempts"] == sum(e["kind"] == "attempt" for e in drawn) == 5
    assert {e["call"] for e in drawn if "call" in e} == {1, 2, 3}
    assert drawn[1] == {
        "kind": "attempt", "call": 1, "burst": 1, "attempt": 1, "outcome": "error",
        "error": "503", "latency_ms": 5, "seq": 2, "t": 5.0, "data": {},
    }  # fmt: skip
    assert drawn[0]["kind"] == "burst_start" and drawn[0]["data"]["first_call"] == 1
    assert chart["data_id"] == "replay-timeline-1-data" and chart["total_ms"] == 100.0
