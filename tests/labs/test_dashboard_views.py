"""The instructor's class dashboard over HTTP: who may see it, what it shows, the class-wide
action views and the exports (test client; no worker, no websocket)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse

from labs.journal import store as journal
from labs.models import Burst, ClassFault, JournalEvent, LabSession
from labs.selectors.dashboard import class_dashboard_rows
from labs.services import lab
from tests.conftest import make_scenario, make_session, make_student

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _no_restore_task(monkeypatch):
    """Timed faults schedule a Celery task on commit; these tests only look at the request."""
    monkeypatch.setattr("labs.services.classroom._schedule_restore", lambda *a: None)


@pytest.fixture
def sessions(classroom, scenario, student):
    bob = make_student("bob_a", classroom)
    return [
        lab.session_open(user=student, classroom=classroom, scenario=scenario),
        lab.session_open(user=bob, classroom=classroom, scenario=scenario),
    ]


def url(name: str, classroom, *args) -> str:
    return reverse(f"labs:{name}", args=[classroom.pk, *args])


def add_rows(session: LabSession, kinds: list[tuple[str, str]]) -> None:
    journal.record(
        [
            journal.Entry(
                session_id=session.pk,
                classroom_id=session.classroom_id,
                kind=kind,
                outcome=outcome,
                message=f"{kind} {outcome}",
            )
            for kind, outcome in kinds
        ]
    )


# --- who may see it ---------------------------------------------------------------------------


def test_instructor_sees_every_session_of_their_class(client, instructor, classroom, sessions):
    client.force_login(instructor)
    response = client.get(url("class_dashboard", classroom))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="dashboard"' in html
    for session in sessions:
        assert f'id="row-{session.pk}"' in html
        # Drill-down: each row links to the student's own lab page (read-only for us).
        assert reverse("labs:session_detail", args=[session.pk]) in html
    assert f'data-ws-path="/ws/classes/{classroom.pk}/"' in html
    assert 'data-count="closed">2<' in html


@pytest.mark.parametrize("who", ["student", "other_instructor", "other_student"])
def test_nobody_but_the_class_instructors_sees_the_dashboard(
    client, request, classroom, sessions, who
):
    client.force_login(request.getfixturevalue(who))
    assert client.get(url("class_dashboard", classroom)).status_code == 404
    for name, args in (
        ("class_export_journal", ["csv"]),
        ("class_export_journal", ["json"]),
        ("class_export_summary", []),
    ):
        assert client.get(url(name, classroom, *args)).status_code == 404


def test_anonymous_visitor_is_sent_to_log_in(client, classroom):
    response = client.get(url("class_dashboard", classroom))
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_superuser_sees_any_class(client, superuser, classroom, sessions):
    client.force_login(superuser)
    assert client.get(url("class_dashboard", classroom)).status_code == 200


def test_home_page_links_the_instructor_to_the_dashboard(client, instructor, classroom):
    client.force_login(instructor)
    html = client.get(reverse("labs:home")).content.decode()
    assert url("class_dashboard", classroom) in html


def test_student_home_page_has_no_dashboard_link(client, student, classroom):
    client.force_login(student)
    html = client.get(reverse("labs:home")).content.decode()
    assert url("class_dashboard", classroom) not in html


# --- what it shows --------------------------------------------------------------------------------


def test_rows_are_read_in_one_query_with_totals_from_the_journal(
    classroom, sessions, django_assert_num_queries
):
    alice, bob = sessions
    add_rows(
        alice,
        [("attempt", "error")] * 4
        + [("call_result", "failure")]
        + [("call_result", "rejected_open")] * 2
        + [("attempt", "ok"), ("call_result", "success")],
    )
    Burst.objects.create(
        session=alice, number=1, size=4, status="done", summary={"calls": 4, "succeeded": 1}
    )
    Burst.objects.create(session=bob, number=1, size=4, status="running")
    with django_assert_num_queries(1):
        rows = {r.session_id: r for r in class_dashboard_rows(classroom_id=classroom.pk)}
    a, b = rows[alice.pk], rows[bob.pk]
    assert (a.calls, a.attempts_total, a.fast_failed, a.succeeded) == (4, 5, 2, 1)
    assert a.last_seq == JournalEvent.objects.filter(session=alice).order_by("-seq")[0].seq
    assert a.last_summary == {"calls": 4, "succeeded": 1}
    assert a.activity == "idle" and b.activity == "bursting"
    assert (b.calls, b.attempts_total, b.last_summary) == (0, 0, None)


def test_breaker_state_and_mode_come_from_the_session(client, instructor, classroom, sessions):
    alice, _ = sessions
    LabSession.objects.filter(pk=alice.pk).update(
        breaker_snapshot={"state": "open"}, dependency={**alice.dependency, "mode": "down"}
    )
    client.force_login(instructor)
    html = client.get(url("class_dashboard", classroom)).content.decode()
    assert f'id="row-{alice.pk}" data-session="{alice.pk}" data-state="open"' in html
    assert 'data-count="open">1<' in html
    assert 'data-mode="down"' in html


# --- class-wide actions --------------------------------------------------------------------------


def test_class_wide_down_flips_every_session(client, instructor, classroom, sessions):
    client.force_login(instructor)
    response = client.post(url("class_set_dependency", classroom), {"mode": "down"}, **HTMX)
    assert response.status_code == 200
    assert "Down: applied to 2 sessions" in response.content.decode()
    for session in sessions:
        session.refresh_from_db()
        assert session.dependency["mode"] == "down"
        row = JournalEvent.objects.get(session=session, kind="fault_injected")
        assert "teacher_a" in row.message
        assert row.actor == instructor


def test_class_wide_fault_with_duration_is_stored_for_its_restore(
    client, instructor, classroom, sessions
):
    client.force_login(instructor)
    response = client.post(
        url("class_set_dependency", classroom),
        {"mode": "rate_limited", "duration_s": "30"},
        **HTMX,
    )
    assert response.status_code == 200
    fault = ClassFault.objects.get(classroom=classroom)
    assert fault.duration_s == 30
    assert set(fault.sessions) == {str(s.pk) for s in sessions}
    text = response.content.decode()
    assert "Rate limited for 30 s (then each session&#x27;s previous mode comes back)" in text
    assert "fault-banner" in text
    # the mode in the lab page's words, on the banner and on the page itself
    assert "Class-wide <strong>Rate limited</strong> until" in text
    page = client.get(url("class_dashboard", classroom)).content.decode()
    assert "Class-wide <strong>Rate limited</strong> until" in page
    assert '<option value="rate_limited">Rate limited</option>' in page


@pytest.mark.parametrize(
    ("post", "expected"),
    [
        ({"mode": "sideways"}, "dependency.mode: must be one of"),
        ({"mode": "down", "duration_s": "0"}, "Duration: must be between 1 and 3600 s (got 0)"),
        ({"mode": "down", "duration_s": "3601"}, "Duration: must be between 1 and 3600"),
        ({"mode": "down", "duration_s": "soon"}, "Duration: must be a whole number"),
        ({"mode": "down", "duration_s": "1e1"}, "Duration: must be a whole number"),
        ({"mode": "flaky", "fail_count": "1e1"}, "dependency.fail_count: must be"),
        ({"mode": "flaky", "fail_count": "500"}, "dependency.fail_count: must be"),
        ({"mode": "error_rate", "rate": "2"}, "dependency.rate: must be"),
    ],
)
def test_invalid_class_wide_action_is_refused_with_field_and_range(
    client, instructor, classroom, sessions, post, expected
):
    before = {s.pk: dict(s.dependency) for s in sessions}
    rows_before = JournalEvent.objects.count()
    client.force_login(instructor)
    response = client.post(url("class_set_dependency", classroom), post, **HTMX)
    assert response.status_code == 422
    html = response.content.decode()
    assert expected in html
    assert "no session was changed" in html
    for session in sessions:
        session.refresh_from_db()
        assert session.dependency == before[session.pk]
    assert JournalEvent.objects.count() == rows_before
    assert not ClassFault.objects.exists()


def test_refused_action_without_htmx_renders_the_page_with_problems(
    client, instructor, classroom, sessions
):
    client.force_login(instructor)
    response = client.post(
        url("class_set_dependency", classroom), {"mode": "down", "duration_s": "9999"}
    )
    assert response.status_code == 422
    assert 'id="dashboard"' in response.content.decode()
    assert "Duration: must be between 1 and 3600" in response.content.decode()


def test_action_without_htmx_redirects_back_to_the_dashboard(
    client, instructor, classroom, sessions
):
    client.force_login(instructor)
    response = client.post(url("class_set_dependency", classroom), {"mode": "healthy"})
    assert response.status_code == 302
    assert response["Location"] == url("class_dashboard", classroom)


@pytest.mark.parametrize("who", ["student", "other_instructor"])
@pytest.mark.parametrize("action", ["class_set_dependency", "class_reset", "class_assign_scenario"])
def test_only_the_class_instructors_may_act_on_it(
    client, request, classroom, sessions, who, action
):
    client.force_login(request.getfixturevalue(who))
    rows_before = JournalEvent.objects.count()
    response = client.post(url(action, classroom), {"mode": "down", "scenario": "1"}, **HTMX)
    assert response.status_code == 404
    assert JournalEvent.objects.count() == rows_before
    assert all(s.dependency["mode"] != "down" for s in LabSession.objects.all())


def test_actions_refuse_get(client, instructor, classroom):
    client.force_login(instructor)
    assert client.get(url("class_reset", classroom)).status_code == 405


def test_reset_all_reports_sessions_skipped_for_a_running_burst(
    client, instructor, classroom, sessions
):
    alice, bob = sessions
    Burst.objects.create(session=bob, number=1, size=3, status="running")
    client.force_login(instructor)
    response = client.post(url("class_reset", classroom), **HTMX)
    assert response.status_code == 200
    assert "reset 1 session; 1 skipped (a burst is running)" in response.content.decode()
    assert JournalEvent.objects.filter(session=alice, kind="session_reset").exists()
    assert not JournalEvent.objects.filter(session=bob, kind="session_reset").exists()


def test_assign_scenario_announces_it_in_every_session(client, instructor, classroom, sessions):
    extra = make_scenario("retry-storm", title="Retry storm")
    client.force_login(instructor)
    response = client.post(url("class_assign_scenario", classroom), {"scenario": extra.pk}, **HTMX)
    assert response.status_code == 200
    assert classroom.scenarios.filter(pk=extra.pk).exists()
    for session in sessions:
        row = JournalEvent.objects.get(session=session, kind="scenario_assigned")
        assert "Retry storm" in row.message and "teacher_a" in row.message


def test_assign_unknown_scenario_is_refused(client, instructor, classroom, sessions):
    client.force_login(instructor)
    response = client.post(url("class_assign_scenario", classroom), {"scenario": "x"}, **HTMX)
    assert response.status_code == 422
    assert "scenario:" in response.content.decode()


# --- exports --------------------------------------------------------------------------------------


def test_journal_csv_export_streams_every_row_of_the_class(
    client, instructor, classroom, other_classroom, scenario, sessions
):
    alice, bob = sessions
    add_rows(alice, [("attempt", "ok"), ("call_result", "success")])
    add_rows(bob, [("attempt", "error")])
    outsider = make_session(make_student("zed", other_classroom), other_classroom, scenario)
    add_rows(outsider, [("attempt", "ok")])
    client.force_login(instructor)
    response = client.get(url("class_export_journal", classroom, "csv"))
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(table) == JournalEvent.objects.filter(session__classroom=classroom).count() == 3
    assert {r["student"] for r in table} == {"alice", "bob_a"}
    assert [r["seq"] for r in table if r["student"] == "alice"] == ["1", "2"]
    assert json.loads(table[0]["data"]) == {}


def test_journal_json_export_is_one_valid_array(client, instructor, classroom, sessions):
    alice, _ = sessions
    lab.session_set_dependency(session=alice, user=instructor, changes={"mode": "down"})
    client.force_login(instructor)
    response = client.get(url("class_export_journal", classroom, "json"))
    assert isinstance(response, StreamingHttpResponse)
    items = json.loads(b"".join(response.streaming_content))
    assert len(items) == 1
    assert items[0]["kind"] == "dependency_set"
    assert items[0]["actor"] == "teacher_a"
    assert items[0]["student"] == "alice"
    assert items[0]["data"]["mode"] == "down"


def test_journal_export_of_an_unknown_format_is_404(client, instructor, classroom):
    client.force_login(instructor)
    assert client.get(url("class_export_journal", classroom, "xml")).status_code == 404


def test_summary_csv_has_one_row_per_student_session(client, instructor, classroom, sessions):
    alice, _ = sessions
    add_rows(alice, [("attempt", "ok"), ("call_result", "success")])
    client.force_login(instructor)
    response = client.get(url("class_export_summary", classroom))
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["username"] for r in table] == ["alice", "bob_a"]
    assert (table[0]["calls"], table[0]["attempts_total"], table[0]["succeeded"]) == ("1", "1", "1")
    assert table[0]["breaker_state"] == "closed"


def test_row_values_are_escaped(client, instructor, classroom, sessions):
    alice, _ = sessions
    alice.owner.first_name = "<b>Al</b>"
    alice.owner.save()
    client.force_login(instructor)
    html = client.get(url("class_dashboard", classroom)).content.decode()
    assert "&lt;b&gt;Al&lt;/b&gt;" in html
    assert "<b>Al</b>" not in html.split('id="dashboard-rows"')[0]


def test_class_exports_neutralise_spreadsheet_formulas(client, instructor, classroom, sessions):
    """Names and messages students typed reach the class exports: a cell starting with ``=``
    must not run as a formula when the instructor opens the file in a spreadsheet."""
    alice, _ = sessions
    alice.owner.first_name = "=HYPERLINK(\"http://evil\",\"x\")"
    alice.owner.last_name = ""
    alice.owner.save()
    journal.record(
        [
            journal.Entry(
                session_id=alice.pk, classroom_id=alice.classroom_id, kind="policy_set",
                message="@SUM(1+1)",
            )
        ]
    )  # fmt: skip
    client.force_login(instructor)
    summary = b"".join(client.get(url("class_export_summary", classroom)).streaming_content)
    table = list(csv.DictReader(io.StringIO(summary.decode())))
    assert table[0]["student"] == "'=HYPERLINK(\"http://evil\",\"x\")"
    journal_csv = b"".join(
        client.get(url("class_export_journal", classroom, "csv")).streaming_content
    )
    messages = [r["message"] for r in csv.DictReader(io.StringIO(journal_csv.decode()))]
    assert "'@SUM(1+1)" in messages
    assert "@SUM(1+1)" not in messages


def test_the_chain_form_says_what_a_chain_needs_before_two_sessions_share_the_dependency(
    client, instructor, classroom, sessions
):
    client.force_login(instructor)
    html = client.get(url("class_dashboard", classroom)).content.decode()
    assert "A chain needs at least 2 sessions on the shared dependency, one a tier" in html
    assert "2 to 2 tiers" not in html
    for session in sessions:
        lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "shared"})
    html = client.get(url("class_dashboard", classroom)).content.decode()
    assert "2 to 2 tiers; blank: no chain." in html
