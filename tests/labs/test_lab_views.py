"""The live lab page over HTTP (Django test client): who may see and drive a session, refused
input that changes nothing, the burst refusals, read-only watching, paging and exports.

Requests run the real services (Redis for the breaker); Celery tasks and websocket pushes are
queued with ``on_commit`` and never fire inside these test transactions, so a burst started
here stays QUEUED, which is exactly what the 409 test needs.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from labs import views as views_lab
from labs.engine import LIMITS
from labs.forms.lab import LIST_MAX_LENGTH, NUMBER_MAX_LENGTH
from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import lab
from tests.conftest import (
    flush_test_redis,
    make_instructor,
    make_scenario,
    make_student,
    tour_script,
)

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _fresh_redis():
    # Session ids are reused between tests (rolled-back inserts), so their Redis keys must go.
    flush_test_redis()


@pytest.fixture
def session(student, classroom, scenario) -> LabSession:
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


@pytest.fixture
def owner_client(client, student):
    client.force_login(student)
    return client


def url(name: str, session: LabSession, *args) -> str:
    return reverse(f"labs:{name}", args=[session.pk, *args])


def journal_count(session: LabSession) -> int:
    return JournalEvent.objects.filter(session=session).count()


def add_rows(session: LabSession, count: int) -> None:
    journal.record(
        [
            journal.Entry(
                session_id=session.pk,
                classroom_id=session.classroom_id,
                kind="policy_set",
                message=f"row {i + 1}",
            )
            for i in range(count)
        ]
    )


def seqs_in(html: str) -> list[int]:
    import re

    return [int(s) for s in re.findall(r'id="ev-(\d+)"', html)]


# --- who may see it -----------------------------------------------------------------------


def test_owner_sees_the_live_page_with_every_control_enabled(owner_client, session):
    response = owner_client.get(url("session_detail", session))
    assert response.status_code == 200
    assert response.context["read_only"] is False
    html = response.content.decode()
    for needle in (
        'id="breaker-badge"',
        'id="burst-summary"',
        'id="dependency-form"',
        'id="policy-form"',
        'id="burst-form"',
        'id="journal-rows"',
        'id="timeline-chart"',
        'id="reset-session"',
        'id="force-open"',
        'id="force-close"',
        f'data-ws-path="/ws/sessions/{session.pk}/"',
        '<script type="module" src="/static/js/lab/main.js">',
    ):
        assert needle in html, needle
    assert "disabled" not in html.split('id="burst-form"')[1].split("</form>")[0]
    assert "CLOSED" in html


def test_every_policy_setting_shows_its_allowed_range(owner_client, session):
    html = owner_client.get(url("session_detail", session)).content.decode()
    assert "Allowed: between 1 and 5" in html  # max attempts
    assert "Allowed: between 100 and 60000 ms" in html  # cooldown
    assert "Allowed: between the backoff base and 2000 ms" in html  # cap
    assert "Allowed: one of none, full, equal, decorrelated, proportional" in html
    assert "Allowed: blank (off) or between 0 and 10000 ms" in html  # deadline
    for name in (
        "max_attempts", "backoff_base_ms", "backoff_cap_ms", "jitter", "nesting", "deadline_ms",
        "attempt_timeout_ms", "breaker_kind", "breaker_failure_threshold", "breaker_cooldown_ms",
        "breaker_cooldown_jitter_pct", "breaker_half_open_max_probes",
        "breaker_success_threshold", "breaker_failure_ratio", "breaker_min_calls",
        "breaker_window_ms", "breaker_window_calls", "budget", "budget_token_ratio",
        "budget_max_tokens", "latency_ms", "fail_count", "size", "concurrency",
    ):  # fmt: skip
        assert f'<label for="id_{name}">' in html, name


def test_another_student_gets_404_everywhere(client, session, other_student):
    client.force_login(other_student)
    assert client.get(url("session_detail", session)).status_code == 404
    assert client.get(url("session_journal", session) + "?before=5").status_code == 404
    assert client.get(url("session_export", session, "csv")).status_code == 404
    assert client.get(url("session_export", session, "json")).status_code == 404
    before = journal_count(session)
    for name, data in (
        ("session_dependency", {"mode": "down"}),
        ("session_policy", {"max_attempts": "2"}),
        ("session_burst", {"size": "6"}),
        ("session_reset", {}),
        ("session_breaker", {"action": "open"}),
    ):
        assert client.post(url(name, session), data, **HTMX).status_code == 404, name
    assert journal_count(session) == before
    assert not Burst.objects.filter(session=session).exists()


def test_a_classmate_who_does_not_own_the_session_gets_404(client, session, classroom):
    classmate = make_student("carol", classroom)
    client.force_login(classmate)
    assert client.get(url("session_detail", session)).status_code == 404


def test_anonymous_visitor_is_sent_to_the_login_page(client, session):
    for response in (
        client.get(url("session_detail", session)),
        client.post(url("session_burst", session), {"size": "6"}),
        client.get(url("session_export", session, "csv")),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert not Burst.objects.filter(session=session).exists()


# --- read only ------------------------------------------------------------------------------


def test_instructor_of_the_class_watches_read_only(client, session, instructor):
    client.force_login(instructor)
    response = client.get(url("session_detail", session))
    assert response.status_code == 200
    assert response.context["read_only"] is True
    html = response.content.decode()
    assert "Read only." in html
    for form_id in ("burst-form", "dependency-form", "policy-form"):
        form = html.split(f'id="{form_id}"')[1].split("</form>")[0]
        assert "<fieldset disabled" in form or '<fieldset class="policy-fields" disabled' in form
    for button in ("reset-session", "force-open", "force-close"):
        assert f'id="{button}" disabled' in html
    assert "Do it" not in html  # the checklist offers no actions to a watcher


def test_write_views_refuse_a_watcher_with_403_and_change_nothing(client, session, instructor):
    client.force_login(instructor)
    before = (session.dependency, session.policy, journal_count(session))
    for name, data in (
        ("session_dependency", {"mode": "down"}),
        ("session_policy", {"max_attempts": "2"}),
        ("session_burst", {"size": "6"}),
        ("session_reset", {}),
        ("session_breaker", {"action": "open"}),
    ):
        assert client.post(url(name, session), data, **HTMX).status_code == 403, name
    session.refresh_from_db()
    assert (session.dependency, session.policy, journal_count(session)) == before
    assert runtime.breaker_view(session)["state"] == "closed"


def test_instructor_of_another_class_gets_404(client, session, other_instructor):
    client.force_login(other_instructor)
    assert client.get(url("session_detail", session)).status_code == 404


def test_superuser_watches_read_only(client, session, superuser):
    client.force_login(superuser)
    response = client.get(url("session_detail", session))
    assert response.status_code == 200
    assert response.context["read_only"] is True


# --- bad input changes nothing --------------------------------------------------------------


def test_out_of_range_dependency_value_is_shown_beside_its_field_and_changes_nothing(
    owner_client, session
):
    before = (dict(session.dependency), journal_count(session))
    response = owner_client.post(
        url("session_dependency", session), {"mode": "flaky", "fail_count": "500"}, **HTMX
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert html.lstrip().startswith('<form id="dependency-form"')
    field = html.split('data-field="fail_count"')[1].split('<div class="field')[0]
    assert "Flaky: failing attempts: must be between 1 and 100 (got 500)" in field
    assert "Allowed: between 1 and 100" in field
    assert 'value="500"' in field  # what the student typed stays in the field
    assert 'aria-invalid="true"' in field
    session.refresh_from_db()
    assert (session.dependency, journal_count(session)) == before


def test_every_bad_policy_field_is_named_and_nothing_is_half_applied(owner_client, session):
    before = (dict(session.policy), journal_count(session))
    response = owner_client.post(
        url("session_policy", session),
        {
            "max_attempts": "9",  # bad
            "breaker_cooldown_ms": "50",  # bad
            "backoff_base_ms": "100",
            "backoff_cap_ms": "40",  # bad: below the base
            "breaker_failure_threshold": "5",  # fine, but must not be applied alone
        },
        **HTMX,
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "Max attempts per call: must be between 1 and 5 (got 9)" in html
    assert "Cooldown (ms): must be between 100 and 60000 ms (got 50)" in html
    assert (
        "Backoff cap (ms): must be between the backoff base (100 ms) and 2000 ms (got 40)" in html
    )
    session.refresh_from_db()
    assert (session.policy, journal_count(session)) == before


def test_text_where_a_number_belongs_is_refused_with_the_range(owner_client, session):
    response = owner_client.post(
        url("session_policy", session), {"max_attempts": "lots", "deadline_ms": "2.5x"}, **HTMX
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert (
        "Max attempts per call: must be an integer between 1 and 5 (got &#x27;lots&#x27;)" in html
    )
    assert "Per-call deadline (ms): must be an integer null (off) or between 0 and 10000 ms" in html


def test_unknown_mode_is_refused(owner_client, session):
    response = owner_client.post(url("session_dependency", session), {"mode": "exploding"}, **HTMX)
    assert response.status_code == 422
    assert "must be one of healthy, flaky, down" in response.content.decode()
    session.refresh_from_db()
    assert session.dependency["mode"] == "flaky"


def test_without_javascript_a_refused_form_renders_the_whole_page(owner_client, session):
    response = owner_client.post(url("session_policy", session), {"max_attempts": "0"})
    assert response.status_code == 422
    html = response.content.decode()
    assert "<html" in html and "must be between 1 and 5 (got 0)" in html


# --- good input -----------------------------------------------------------------------------


def test_mode_button_sets_the_dependency_and_journals_it(owner_client, session, student):
    response = owner_client.post(
        url("session_dependency", session),
        {"mode": "down", "latency_ms": "40", "error": "500"},
        **HTMX,
    )
    assert response.status_code == 200
    assert "Dependency set." in response.content.decode()
    session.refresh_from_db()
    assert session.dependency["mode"] == "down"
    assert session.dependency["latency_ms"] == 40
    assert session.dependency["error"] == "500"
    row = JournalEvent.objects.filter(session=session).order_by("-seq").first()
    assert row.kind == "dependency_set" and row.actor == student


def test_apply_parameters_keeps_the_mode(owner_client, session):
    owner_client.post(url("session_dependency", session), {"fail_count": "7"}, **HTMX)
    session.refresh_from_db()
    assert session.dependency["mode"] == "flaky"
    assert session.dependency["fail_count"] == 7


def test_policy_form_sets_nested_breaker_budget_and_turns_deadline_off(owner_client, session):
    owner_client.post(url("session_policy", session), {"deadline_ms": "800"}, **HTMX)
    response = owner_client.post(
        url("session_policy", session),
        {
            "max_attempts": "3",
            "breaker_cooldown_ms": "5000",
            "budget": "on",
            "budget_token_ratio": "0.2",
            "budget_max_tokens": "5",
            "deadline_ms": "",
        },
        **HTMX,
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.policy["max_attempts"] == 3
    assert session.policy["breaker"]["cooldown_ms"] == 5000
    assert session.policy["breaker"]["failure_threshold"] == 3  # untouched
    assert session.policy["retry_budget"] == {"token_ratio": 0.2, "max_tokens": 5}
    assert session.policy["deadline_ms"] is None
    owner_client.post(url("session_policy", session), {"budget": "off"}, **HTMX)
    session.refresh_from_db()
    assert session.policy["retry_budget"] is None


def test_without_javascript_a_good_form_redirects_back_to_the_page(owner_client, session):
    response = owner_client.post(url("session_dependency", session), {"mode": "healthy"})
    assert response.status_code == 302
    assert response["Location"] == url("session_detail", session)


# --- bursts --------------------------------------------------------------------------------


def test_run_burst_queues_one(owner_client, session):
    response = owner_client.post(url("session_burst", session), {"size": "6"}, **HTMX)
    assert response.status_code == 200
    assert "Burst 1 queued: 6 calls." in response.content.decode()
    burst = Burst.objects.get(session=session)
    assert (burst.size, burst.concurrency, burst.status) == (6, 1, "queued")


def click_in_burst_form(client, session, data: dict):
    """Run burst clicked in the burst form, as htmx sends it (the form's id as HX-Trigger)."""
    return client.post(
        url("session_burst", session), data,
        HTTP_HX_TRIGGER="burst-form", HTTP_HX_TARGET="burst-form", **HTMX,
    )  # fmt: skip


def test_run_burst_clicked_in_its_form_answers_only_the_message_line(owner_client, session):
    """htmx names the form that made the request (HX-Trigger): only its message line comes
    back, retargeted there, so the form's fields are not rendered again."""
    response = click_in_burst_form(owner_client, session, {"size": "6"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<p id="burst-message"') and "Burst 1 queued: 6 calls." in html
    assert 'id="burst-form"' not in html and "<input" not in html
    assert response["HX-Retarget"] == "#burst-message"
    assert response["HX-Reswap"] == "outerHTML"
    assert Burst.objects.get(session=session).status == "queued"


def test_a_burst_form_showing_errors_gets_the_whole_form_back_clean_when_a_click_succeeds(
    owner_client, session
):
    """A refused click renders the form with its field errors and a hidden errors_shown
    input; the corrected click posts it, so the answer is the whole form, without the errors
    (a message line alone would leave them beside the corrected values)."""
    refused = click_in_burst_form(owner_client, session, {"size": "50"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert f'name="{views_lab.ERRORS_SHOWN}"' in html and "field-error" in html
    response = click_in_burst_form(
        owner_client, session, {"size": "6", views_lab.ERRORS_SHOWN: "1"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="burst-form"' in html and "Burst 1 queued: 6 calls." in html
    assert "field-error" not in html and views_lab.ERRORS_SHOWN not in html
    assert "HX-Retarget" not in response


def test_a_steps_do_it_button_gets_the_burst_form_back_with_its_values(owner_client, session):
    response = owner_client.post(url("session_burst", session), {"size": "9"}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and 'id="burst-form"' in html
    assert 'value="9"' in html and "Burst 1 queued: 9 calls." in html
    assert "HX-Retarget" not in response


def test_bad_burst_numbers_answer_400_with_the_ranges_and_start_nothing(owner_client, session):
    response = owner_client.post(
        url("session_burst", session), {"size": "50", "concurrency": "0"}, **HTMX
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Calls in the burst: must be between 1 and 20 (got 50)" in html
    assert "Concurrent callers: must be between 1 and 10 (got 0)" in html
    assert not Burst.objects.filter(session=session).exists()
    response = owner_client.post(url("session_burst", session), {"size": "six"}, **HTMX)
    assert response.status_code == 400
    assert "must be a whole number between 1 and 20 (got &#x27;six&#x27;)" in (
        response.content.decode()
    )


def test_second_burst_while_one_is_running_answers_409_with_the_sentence(owner_client, session):
    assert (
        owner_client.post(url("session_burst", session), {"size": "6"}, **HTMX).status_code == 200
    )
    rows = journal_count(session)
    response = owner_client.post(url("session_burst", session), {"size": "6"}, **HTMX)
    assert response.status_code == 409
    assert "A burst is already running in this session" in response.content.decode()
    assert Burst.objects.filter(session=session).count() == 1
    assert journal_count(session) == rows


def test_reset_is_refused_while_a_burst_runs(owner_client, session):
    owner_client.post(url("session_policy", session), {"max_attempts": "2"}, **HTMX)
    owner_client.post(url("session_burst", session), {"size": "6"}, **HTMX)
    response = owner_client.post(url("session_reset", session), **HTMX)
    assert response.status_code == 409
    assert "A burst is running" in response.content.decode()
    session.refresh_from_db()
    assert session.policy["max_attempts"] == 2


def test_reset_puts_the_scenario_settings_back_and_refreshes_the_forms(owner_client, session):
    owner_client.post(url("session_policy", session), {"max_attempts": "2"}, **HTMX)
    response = owner_client.post(url("session_reset", session), **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Session reset" in html
    assert 'id="policy-form"' in html and 'hx-swap-oob="true"' in html
    session.refresh_from_db()
    assert session.policy["max_attempts"] == 4


def test_force_open_and_close_move_the_breaker(owner_client, session):
    response = owner_client.post(url("session_breaker", session), {"action": "open"}, **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Breaker forced OPEN." in html
    assert 'id="breaker-badge"' in html and 'data-state="open"' in html
    assert runtime.breaker_view(session)["state"] == "open"
    owner_client.post(url("session_breaker", session), {"action": "closed"}, **HTMX)
    assert runtime.breaker_view(session)["state"] == "closed"
    kinds = list(JournalEvent.objects.filter(session=session).values_list("kind", flat=True))
    assert kinds.count("transition") == 2


def test_force_with_an_unknown_action_is_refused(owner_client, session):
    response = owner_client.post(url("session_breaker", session), {"action": "explode"}, **HTMX)
    assert response.status_code == 400
    assert runtime.breaker_view(session)["state"] == "closed"


# --- journal and scenario --------------------------------------------------------------------


def test_journal_shows_newest_100_first_and_pages_to_older_rows(owner_client, session):
    add_rows(session, 250)
    response = owner_client.get(url("session_detail", session))
    html = response.content.decode()
    page = seqs_in(html)
    assert page == list(range(250, 150, -1))
    assert response.context["last_seq"] == 250
    assert "?before=151" in html
    older = owner_client.get(url("session_journal", session) + "?before=151", **HTMX)
    assert older.status_code == 200
    assert seqs_in(older.content.decode()) == list(range(150, 50, -1))
    assert 'hx-swap-oob="beforeend:#journal-rows"' in older.content.decode()
    oldest = owner_client.get(url("session_journal", session) + "?before=51", **HTMX)
    assert seqs_in(oldest.content.decode()) == list(range(50, 0, -1))
    assert "That is the first row of the journal." in oldest.content.decode()
    assert owner_client.get(url("session_journal", session) + "?before=x").status_code == 400


def test_each_journal_row_carries_its_explanation(owner_client, session):
    owner_client.post(url("session_dependency", session), {"mode": "down"}, **HTMX)
    html = owner_client.get(url("session_detail", session)).content.decode()
    assert "dependency set by alice: down: every attempt fails with 503" in html


def test_scenario_instructions_are_markdown_sanitised(client, classroom, factory):
    scenario = make_scenario(
        "md",
        script=tour_script(name="md"),
        instructions="## Try it\n\n**Break** it.<script>alert(1)</script>"
        '<a href="javascript:alert(1)" onclick="x()">bad</a>',
    )
    classroom.scenarios.add(scenario)
    student = make_student("dave", classroom)
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    client.force_login(student)
    html = client.get(url("session_detail", session)).content.decode()
    instructions = html.split('class="instructions"')[1].split("</div>")[0]
    assert "<h2>Try it</h2>" in instructions and "<strong>Break</strong>" in instructions
    assert "<script" not in instructions and "javascript:" not in instructions
    assert "onclick" not in instructions


def test_scenario_steps_are_a_checklist_with_actions(owner_client, session):
    html = owner_client.get(url("session_detail", session)).content.decode()
    assert html.count('class="step-check"') == 6
    assert "Run a burst of 6 calls." in html
    assert "Set the dependency to down." in html
    assert "Wait 2 s" in html and 'data-step-wait="2000"' in html
    assert 'hx-vals="{&quot;mode&quot;: &quot;down&quot;}"' in html


def test_session_open_applies_the_scenario_presets(owner_client, session):
    html = owner_client.get(url("session_detail", session)).content.decode()
    assert 'id="mode-flaky"' in html
    flaky = html.split('id="mode-flaky"')[1].split(">")[0]
    assert 'aria-pressed="true"' in flaky
    assert 'name="fail_count" value="3"' in html


# --- exports -------------------------------------------------------------------------------


def test_csv_export_has_every_row_oldest_first(owner_client, session):
    add_rows(session, 3)
    response = owner_client.get(url("session_export", session, "csv"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [int(r["seq"]) for r in rows] == [1, 2, 3]
    assert rows[0]["message"] == "row 1" and rows[0]["kind"] == "policy_set"


def test_json_export_matches_the_journal(owner_client, session):
    add_rows(session, 2)
    owner_client.post(url("session_dependency", session), {"mode": "down"}, **HTMX)
    data = json.loads(owner_client.get(url("session_export", session, "json")).content)
    assert data["session"] == session.pk
    assert [e["seq"] for e in data["events"]] == [1, 2, 3]
    assert data["events"][2]["kind"] == "dependency_set"
    assert data["events"][2]["data"]["mode"] == "down"


def test_instructor_may_export_a_student_session(client, session, classroom):
    add_rows(session, 1)
    teacher = make_instructor("teacher_x", classroom)
    client.force_login(teacher)
    assert client.get(url("session_export", session, "json")).status_code == 200


def test_unknown_export_format_is_404(owner_client, session):
    assert owner_client.get(url("session_export", session, "xml")).status_code == 404


def test_csv_export_neutralises_spreadsheet_formulas(owner_client, session):
    journal.record(
        [
            journal.Entry(
                session_id=session.pk,
                classroom_id=session.classroom_id,
                kind="policy_set",
                message="=HYPERLINK(1)",
            )
        ]
    )
    body = b"".join(owner_client.get(url("session_export", session, "csv")).streaming_content)
    assert "'=HYPERLINK(1)" in body.decode()


def test_limits_drive_the_form_ranges():
    from labs.forms.lab import PolicyForm

    form = PolicyForm()
    widget = form.fields["breaker_cooldown_ms"].widget
    limit = LIMITS["policy.breaker.cooldown_ms"]
    assert (widget.attrs["min"], widget.attrs["max"]) == (str(limit.min), str(limit.max))


def test_a_pushed_row_is_byte_for_byte_the_row_on_the_page(owner_client, session):
    from labs.journal.rows import journal_row as render_row
    from labs.journal.store import event_payload

    add_rows(session, 3)
    owner_client.post(url("session_dependency", session), {"mode": "down"}, **HTMX)
    html = owner_client.get(url("session_detail", session)).content.decode()
    for row in JournalEvent.objects.filter(session=session):
        assert render_row(event_payload(row)) in html


# --- over-long values and numbers in disguise --------------------------------------------------

# Under DATA_UPLOAD_MAX_MEMORY_SIZE, so the form itself must refuse it.
LONG = "9" * 500_000


@pytest.mark.parametrize(
    "name,data,field,label",
    [
        ("session_dependency", {"mode": "flaky", "latency_ms": LONG}, "latency_ms",
         "Latency per attempt (ms)"),
        ("session_dependency", {"mode": "script", "outcomes": "fail," * 100_000}, "outcomes",
         "Script: outcomes in order"),
        ("session_policy", {"max_attempts": LONG, "deadline_ms": "500"}, "max_attempts",
         "Max attempts per call"),
    ],
)  # fmt: skip
def test_an_over_long_value_is_refused_by_name_and_not_echoed(
    owner_client, session, name, data, field, label
):
    before = (dict(session.dependency), dict(session.policy), journal_count(session))
    response = owner_client.post(url(name, session), data, **HTMX)
    assert response.status_code == 422
    html = response.content.decode()
    assert len(html) < 100_000  # neither the message nor the field carries the value
    limit = LIST_MAX_LENGTH if field == "outcomes" else NUMBER_MAX_LENGTH
    assert f"{label}: at most {limit} characters" in html
    session.refresh_from_db()
    assert (session.dependency, session.policy, journal_count(session)) == before


def test_an_over_long_burst_size_is_refused_and_not_echoed(owner_client, session):
    response = owner_client.post(
        url("session_burst", session), {"size": LONG, "concurrency": "1"}, **HTMX
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert len(html) < 100_000
    assert "Calls in the burst: at most" in html
    assert not Burst.objects.filter(session=session).exists()


@pytest.mark.parametrize("typed", ["1e1", "10.0", "1_0", "\u0661\u0660", "0x0a"])
def test_a_burst_size_must_be_a_plain_whole_number(owner_client, session, typed):
    response = owner_client.post(
        url("session_burst", session), {"size": typed, "concurrency": "1"}, **HTMX
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Calls in the burst: must be a whole number between 1 and 20" in html
    assert not Burst.objects.filter(session=session).exists()


def test_a_whole_number_setting_refuses_exponent_notation(owner_client, session):
    before = dict(session.policy)
    response = owner_client.post(url("session_policy", session), {"max_attempts": "3e0"}, **HTMX)
    assert response.status_code == 422
    assert "Max attempts per call: must be an integer between 1 and 5" in (
        response.content.decode()
    )
    session.refresh_from_db()
    assert session.policy == before


def test_a_decimal_setting_takes_plain_decimals_only(owner_client, session):
    response = owner_client.post(
        url("session_dependency", session), {"mode": "error_rate", "rate": "5e-1"}, **HTMX
    )
    assert response.status_code == 422
    assert "Error rate: failure probability: must be a number between 0 and 1" in (
        response.content.decode()
    )
    response = owner_client.post(
        url("session_dependency", session), {"mode": "error_rate", "rate": "0.25"}, **HTMX
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.dependency["rate"] == 0.25


def test_a_form_body_over_the_upload_limit_is_refused_whole(owner_client, session, settings):
    before = dict(session.dependency)
    response = owner_client.post(
        url("session_dependency", session),
        {"mode": "flaky", "latency_ms": "9" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
        **HTMX,
    )
    assert response.status_code == 400
    assert len(response.content) < 10_000
    session.refresh_from_db()
    assert session.dependency == before


# --- the "Advanced" section: the peer libraries' settings ------------------------------------

ADVANCED_FIELDS = (
    "breaker_cooldown_edge", "breaker_cooldown_multiplier", "breaker_cooldown_max_ms",
    "breaker_ratio_checked_on", "breaker_half_open_calls", "breaker_half_open_decision",
    "breaker_slow_call_ms", "breaker_slow_call_ratio",
    "breaker_counts", "breaker_count_interval_ms", "breaker_admission",
    "budget_kind", "budget_ttl_ms", "budget_min_retries_per_sec", "budget_percent_can_retry",
    "retry_after",
)  # fmt: skip


def _advanced_section(html: str) -> str:
    marker = '<details class="field-group" id="policy-group-advanced" data-group="advanced"'
    return html.split(marker)[1].split("</details>")[0]


def test_every_peer_setting_is_in_the_collapsed_advanced_section(owner_client, session):
    html = owner_client.get(url("session_detail", session)).content.decode()
    section = _advanced_section(html)
    assert section.startswith(">")  # collapsed: no "open" attribute
    for name in ADVANCED_FIELDS:
        assert f'<label for="id_{name}">' in section, name
    assert "Allowed: one of inclusive, strict" in section
    assert "Allowed: blank (off) or between 100 and 3600000 ms" in section
    assert "Allowed: one of per call, grpc, finagle" in section
    assert "<script" not in section and "style=" not in section  # the page's CSP


def test_posting_an_advanced_field_changes_the_policy(owner_client, session):
    response = owner_client.post(
        url("session_policy", session),
        {
            "breaker_cooldown_edge": "strict",
            "breaker_cooldown_multiplier": "2",
            "breaker_cooldown_max_ms": "16000",
            "breaker_half_open_calls": "4",
            "breaker_half_open_decision": "ratio",
            "retry_after": "pushback",
            "breaker_counts": "gobreaker",
            "breaker_count_interval_ms": "30000",
            "breaker_admission": "strict",
        },
        **HTMX,
    )
    assert response.status_code == 200
    session.refresh_from_db()
    breaker = session.policy["breaker"]
    assert breaker["cooldown_edge"] == "strict"
    assert breaker["cooldown_multiplier"] == 2
    assert breaker["cooldown_max_ms"] == 16000
    assert (breaker["half_open_calls"], breaker["half_open_decision"]) == (4, "ratio")
    assert breaker["failure_threshold"] == 3  # untouched
    assert session.policy["retry_after"] == "pushback"
    assert (breaker["counts"], breaker["count_interval_ms"]) == ("gobreaker", 30000)
    assert breaker["admission"] == "strict"
    html = response.content.decode()
    assert 'name="breaker_cooldown_max_ms" value="16000"' in _advanced_section(html)


def test_slow_calls_are_set_from_the_advanced_section(owner_client, session):
    response = owner_client.post(
        url("session_policy", session),
        {
            "breaker_kind": "rolling_ratio",
            "breaker_slow_call_ms": "300",
            "breaker_slow_call_ratio": "0.5",
        },
        **HTMX,
    )
    assert response.status_code == 200
    session.refresh_from_db()
    breaker = session.policy["breaker"]
    assert (breaker["slow_call_ms"], breaker["slow_call_ratio"]) == (300, 0.5)


def test_the_advanced_budget_kinds_are_set_from_the_form(owner_client, session):
    owner_client.post(
        url("session_policy", session),
        {
            "budget": "on",
            "budget_kind": "finagle",
            "budget_ttl_ms": "5000",
            "budget_min_retries_per_sec": "3",
            "budget_percent_can_retry": "0.5",
        },
        **HTMX,
    )
    session.refresh_from_db()
    budget = session.policy["retry_budget"]
    assert budget["kind"] == "finagle"
    assert (budget["ttl_ms"], budget["min_retries_per_sec"], budget["percent_can_retry"]) == (
        5000,
        3,
        0.5,
    )
    owner_client.post(
        url("session_policy", session),
        {"budget": "on", "budget_kind": "grpc", "budget_max_tokens": "4"},
        **HTMX,
    )
    session.refresh_from_db()
    assert session.policy["retry_budget"]["kind"] == "grpc"
    assert session.policy["retry_budget"]["max_tokens"] == 4


def test_a_bad_advanced_field_is_named_with_its_range_and_opens_the_section(owner_client, session):
    before = (dict(session.policy), journal_count(session))
    response = owner_client.post(
        url("session_policy", session),
        {"breaker_half_open_calls": "500", "budget": "on", "budget_ttl_ms": "10"},
        **HTMX,
    )
    assert response.status_code == 422
    html = response.content.decode()
    section = _advanced_section(html)
    assert section.startswith(" open>")
    assert (
        "Half-open: probes per period: must be null (off) or between 1 and 100 calls (got 500)"
        in (section)
    )
    assert "Finagle: deposit lifetime (ms): must be between 1000 and 60000 ms (got 10)" in section
    session.refresh_from_db()
    assert (session.policy, journal_count(session)) == before


@pytest.mark.parametrize(
    ("post", "field_label", "names"),
    [
        (
            {"breaker_slow_call_ms": "500"},
            "Rolling: slow call above (ms)",
            "the breaker kind rolling ratio",
        ),
        (
            {"breaker_cooldown_multiplier": "2", "breaker_cooldown_max_ms": ""},
            "Cooldown multiplier",
            "a cooldown ceiling",
        ),
        (
            {"breaker_cooldown_ms": "5000", "breaker_cooldown_max_ms": "1000"},
            "Cooldown ceiling (ms)",
            "the cooldown (5000 ms)",
        ),
        (
            {"breaker_half_open_decision": "ratio", "breaker_half_open_calls": ""},
            "Half-open: decided by",
            "the probes per half-open period",
        ),
        (
            {"breaker_half_open_calls": "2", "breaker_success_threshold": "3"},
            "Successes to close",
            "the probes per half-open period (2)",
        ),
    ],
)
def test_an_impossible_advanced_combination_names_both_fields(
    owner_client, session, post, field_label, names
):
    before = dict(session.policy)
    response = owner_client.post(url("session_policy", session), post, **HTMX)
    assert response.status_code == 422
    html = response.content.decode()
    assert f"{field_label}: " in html and names in html
    session.refresh_from_db()
    assert session.policy == before


@pytest.mark.parametrize(
    "moment,zone,text",
    [
        ((2026, 7, 1, 12, 3, 7, 5_000), "Europe/Paris", "14:03:07.005"),  # summer: UTC+2
        ((2026, 1, 1, 23, 59, 59, 999_999), "Europe/Paris", "00:59:59.999"),  # winter: UTC+1
        ((2026, 1, 1, 0, 0, 0, 0), "UTC", "00:00:00.000"),
    ],
)
def test_a_rows_clock_is_in_the_sites_zone_to_the_millisecond(settings, moment, zone, text):
    from datetime import UTC, datetime

    from labs.journal.rows import clock_text

    settings.TIME_ZONE = zone
    assert clock_text(datetime(*moment, tzinfo=UTC)) == text
    assert clock_text(None) == ""


# --- a server with a queue, the student's own -----------------------------------------------


def test_a_server_with_a_queue_is_set_from_its_fields_and_journalled_in_words(
    owner_client, session
):
    response = owner_client.post(
        url("session_dependency", session),
        {
            "mode": "server",
            "server_servers": "2",
            "server_service_ms": "100",
            "server_max_queue_ms": "300",
            "server_discipline": "lifo",
            "server_rate_per_s": "",  # blank: off
        },
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Dependency set." in html
    # the server's group stays open, its queue order as the option reads
    assert (
        '<details class="field-group" id="dependency-group-server" data-group="server" open>'
        in html
    )
    assert '<option value="lifo" selected>newest first (LIFO)</option>' in html
    session.refresh_from_db()
    server = session.dependency["server"]
    assert (server["servers"], server["service_ms"], server["max_queue_ms"]) == (2, 100, 300)
    assert server["discipline"] == "lifo" and server["rate_per_s"] is None
    row = JournalEvent.objects.filter(session=session).order_by("-seq").first()
    assert row.message.endswith(
        "dependency set by alice: your own server with a queue: 2 servers x 100 ms, queue up "
        "to 300 ms (20 attempts/s); a freed server takes the newest waiting attempt (LIFO)"
    )


@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        (
            {"server_service_ms": "0"},
            "server_service_ms",
            "Service time per attempt (ms): must be between 1 and 2000 ms (got 0)",
        ),
        (
            {"server_servers": "many"},
            "server_servers",
            "Servers: must be an integer between 1 and 64 servers (got &#x27;many&#x27;)",
        ),
        (
            {"server_discipline": "lifo", "server_codel_target_ms": "20"},
            "server_discipline",
            "Queue order: must be fifo (first come, first served) while CoDel is on",
        ),
    ],
)
def test_a_bad_server_setting_is_named_beside_its_field_and_changes_nothing(
    owner_client, session, posted, field, message
):
    before = (dict(session.dependency), journal_count(session))
    response = owner_client.post(
        url("session_dependency", session), {"mode": "server", **posted}, **HTMX
    )
    assert response.status_code == 422
    html = response.content.decode()
    beside = html.split(f'data-field="{field}"')[1].split('<div class="field')[0]
    assert message in beside
    session.refresh_from_db()
    assert (session.dependency, journal_count(session)) == before


def test_a_policy_that_does_not_fit_a_server_is_named_by_its_label(owner_client, session):
    owner_client.post(url("session_policy", session), {"bulkhead": "2"}, **HTMX)
    response = owner_client.post(url("session_dependency", session), {"mode": "server"}, **HTMX)
    assert response.status_code == 422
    assert (
        "Bulkhead: calls in flight per dependency: must be off while the dependency is a "
        "server with a queue (got 2)" in response.content.decode()
    )
    session.refresh_from_db()
    assert session.dependency["mode"] == "flaky"
