"""The back office: instructors are scoped to their own classes; scenarios are validated per
field and run in virtual time; roster import with one-time passwords."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.urls import reverse

from labs.models import Classroom, JournalEvent, LabSession, Membership, Scenario

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def admin_form_data(response) -> dict:
    """POST data reproducing an admin change form as rendered (main form and inlines)."""
    data: dict = {}

    def put(form, name):
        value = form[name].value()
        key = form.add_prefix(name)
        if value is None:
            data[key] = ""
        elif isinstance(value, bool):
            if value:
                data[key] = "on"
        elif isinstance(value, list | tuple):
            data[key] = [str(v) for v in value]
        else:
            data[key] = str(value)

    form = response.context["adminform"].form
    for name in form.fields:
        put(form, name)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = management[name].value()
        for subform in formset.forms:
            for name in subform.fields:
                put(subform, name)
    return data


@pytest.fixture
def teacher_client(client, instructor):
    client.force_login(instructor)
    return client


# --- instructors see only their own classes -----------------------------------------------


def test_instructor_is_staff_in_the_instructors_group(instructor):
    assert instructor.is_staff
    assert instructor.groups.filter(name="Instructors").exists()


def test_instructor_classroom_changelist_shows_only_their_class(
    teacher_client, classroom, other_classroom
):
    response = teacher_client.get(reverse("admin:labs_classroom_changelist"))
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [classroom]
    assert "Resilience B" not in response.content.decode()


def test_instructor_cannot_open_another_class_by_id(teacher_client, other_classroom):
    url = reverse("admin:labs_classroom_change", args=[other_classroom.pk])
    assert teacher_client.get(url).status_code == 404


def test_instructor_cannot_edit_another_class_by_posting(teacher_client, other_classroom):
    url = reverse("admin:labs_classroom_change", args=[other_classroom.pk])
    response = teacher_client.post(url, {"name": "Hijacked", "join_code": "HIJACK22"})
    assert response.status_code == 404
    other_classroom.refresh_from_db()
    assert other_classroom.name == "Resilience B"


def test_instructor_cannot_delete_another_class(teacher_client, other_classroom):
    url = reverse("admin:labs_classroom_delete", args=[other_classroom.pk])
    assert teacher_client.post(url, {"post": "yes"}).status_code == 404
    assert Classroom.objects.filter(pk=other_classroom.pk).exists()


def test_instructor_cannot_read_another_class_history(teacher_client, other_classroom):
    url = reverse("admin:labs_classroom_history", args=[other_classroom.pk])
    assert teacher_client.get(url).status_code == 404


def test_instructor_can_edit_their_own_class(teacher_client, classroom, student):
    url = reverse("admin:labs_classroom_change", args=[classroom.pk])
    page = teacher_client.get(url)
    assert page.status_code == 200
    data = admin_form_data(page)
    data["name"] = "Resilience A (autumn)"
    response = teacher_client.post(url, data)
    assert response.status_code == 302, response.context and response.context["errors"]
    classroom.refresh_from_db()
    assert classroom.name == "Resilience A (autumn)"


def test_classroom_change_page_lists_memberships_inline(teacher_client, classroom, student):
    response = teacher_client.get(reverse("admin:labs_classroom_change", args=[classroom.pk]))
    formsets = response.context["inline_admin_formsets"]
    users = [form.instance.user for form in formsets[0].formset.forms if form.instance.pk]
    assert student in users


def test_instructor_who_adds_a_class_teaches_it(teacher_client, instructor):
    response = teacher_client.post(
        reverse("admin:labs_classroom_add"),
        {
            "name": "New class",
            "join_code": "NEWCLS33",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    room = Classroom.objects.get(name="New class")
    assert Membership.objects.filter(
        user=instructor, classroom=room, role=Membership.Role.INSTRUCTOR
    ).exists()


def test_malformed_join_code_is_a_field_error_in_the_admin(teacher_client):
    response = teacher_client.post(
        reverse("admin:labs_classroom_add"),
        {
            "name": "Bad code",
            "join_code": "no!",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert "join_code" in response.context["adminform"].form.errors or response.context["errors"]
    assert not Classroom.objects.filter(name="Bad code").exists()


def test_instructor_membership_changelist_shows_only_their_classes(
    teacher_client, student, other_student
):
    response = teacher_client.get(reverse("admin:labs_membership_changelist"))
    users = {m.user for m in response.context["cl"].queryset}
    assert student in users
    assert other_student not in users


def test_instructor_cannot_open_a_membership_of_another_class(teacher_client, other_student):
    membership = Membership.objects.get(user=other_student)
    url = reverse("admin:labs_membership_change", args=[membership.pk])
    assert teacher_client.get(url).status_code == 404


def test_membership_add_form_offers_only_the_instructors_classes(teacher_client, classroom):
    response = teacher_client.get(reverse("admin:labs_membership_add"))
    choices = list(response.context["adminform"].form.fields["classroom"].queryset)
    assert choices == [classroom]


def test_instructor_cannot_add_a_membership_to_another_class(
    teacher_client, other_classroom, factory
):
    newcomer = factory.user("newcomer")
    response = teacher_client.post(
        reverse("admin:labs_membership_add"),
        {"user": newcomer.pk, "classroom": other_classroom.pk, "role": "student"},
    )
    assert response.status_code == 200  # the form refuses the choice
    assert not Membership.objects.filter(user=newcomer).exists()


@pytest.fixture
def sessions(student, other_student, classroom, other_classroom, scenario, factory):
    mine = factory.session(student, classroom, scenario)
    theirs = factory.session(other_student, other_classroom, scenario)
    return mine, theirs


def test_instructor_session_changelist_shows_only_their_class(teacher_client, sessions):
    mine, _ = sessions
    response = teacher_client.get(reverse("admin:labs_labsession_changelist"))
    assert list(response.context["cl"].queryset) == [mine]


def test_instructor_cannot_open_a_session_of_another_class(teacher_client, sessions):
    _, theirs = sessions
    url = reverse("admin:labs_labsession_change", args=[theirs.pk])
    assert teacher_client.get(url).status_code == 404


def test_instructor_cannot_see_another_class_journal(teacher_client, sessions):
    mine, theirs = sessions
    JournalEvent.objects.create(session=mine, seq=1, kind="burst_start")
    other_event = JournalEvent.objects.create(session=theirs, seq=1, kind="burst_start")
    response = teacher_client.get(reverse("admin:labs_journalevent_changelist"))
    assert [e.session for e in response.context["cl"].queryset] == [mine]
    url = reverse("admin:labs_journalevent_change", args=[other_event.pk])
    assert teacher_client.get(url).status_code == 404


def test_session_journal_is_inline_read_only_newest_first_and_limited(teacher_client, sessions):
    mine, _ = sessions
    JournalEvent.objects.bulk_create(
        JournalEvent(session=mine, seq=seq, kind="attempt", message=f"event {seq}")
        for seq in range(1, 131)
    )
    response = teacher_client.get(reverse("admin:labs_labsession_change", args=[mine.pk]))
    assert response.status_code == 200
    journal = next(
        f for f in response.context["inline_admin_formsets"] if f.formset.model is JournalEvent
    )
    seqs = [form.instance.seq for form in journal.formset.forms]
    assert seqs[0] == 130
    assert seqs == sorted(seqs, reverse=True)
    assert len(seqs) == 100
    assert not journal.has_add_permission and not journal.has_change_permission
    assert not journal.has_delete_permission


def test_lab_sessions_cannot_be_added_in_the_admin(teacher_client, superuser, client):
    client.force_login(superuser)
    assert client.get(reverse("admin:labs_labsession_add")).status_code == 403


def test_superuser_sees_every_class(client, superuser, classroom, other_classroom):
    client.force_login(superuser)
    response = client.get(reverse("admin:labs_classroom_changelist"))
    assert set(response.context["cl"].queryset) == {classroom, other_classroom}


def test_staff_without_the_group_sees_no_class_data(client, classroom, factory):
    user = factory.user("helper")
    user.is_staff = True
    user.save()
    client.force_login(user)
    assert client.get(reverse("admin:labs_classroom_changelist")).status_code == 403


# --- scenarios ----------------------------------------------------------------------------


def scenario_post(factory, **overrides) -> dict:
    import json

    script = factory.tour_script()
    data = {
        "title": "Flaky then down",
        "slug": "flaky-then-down",
        "description": "A short one.",
        "instructions": "# Try it\nRun a burst.",
        "is_active": "on",
        "position": "5",
        "seed": "7",
        "dependency": json.dumps(script["dependency"]),
        "policy": json.dumps(script["policy"]),
        "steps": json.dumps(script["steps"]),
    }
    data.update(overrides)
    return data


@pytest.fixture
def admin_client_(client, superuser):
    client.force_login(superuser)
    return client


def test_admin_adds_a_valid_scenario(admin_client_, factory):
    response = admin_client_.post(reverse("admin:labs_scenario_add"), scenario_post(factory))
    assert response.status_code == 302
    scenario = Scenario.objects.get(slug="flaky-then-down")
    assert scenario.script["name"] == "flaky-then-down"
    assert scenario.script["seed"] == 7
    assert scenario.script["policy"]["max_attempts"] == 4
    assert scenario.script["steps"][0] == {"burst": 6}


def test_out_of_range_policy_value_is_shown_beside_the_policy_field(admin_client_, factory):
    import json

    policy = factory.tour_script()["policy"]
    policy["max_attempts"] = 9
    response = admin_client_.post(
        reverse("admin:labs_scenario_add"), scenario_post(factory, policy=json.dumps(policy))
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any("policy.max_attempts" in e and "1" in e and "5" in e for e in errors["policy"])
    assert "dependency" not in errors
    assert not Scenario.objects.filter(slug="flaky-then-down").exists()


def test_unknown_dependency_mode_is_shown_beside_the_dependency_field(admin_client_, factory):
    response = admin_client_.post(
        reverse("admin:labs_scenario_add"),
        scenario_post(factory, dependency='{"mode": "on_fire"}'),
    )
    errors = response.context["adminform"].form.errors
    assert any("dependency.mode" in e for e in errors["dependency"])


def test_bad_step_is_shown_beside_the_steps_field(admin_client_, factory):
    response = admin_client_.post(
        reverse("admin:labs_scenario_add"), scenario_post(factory, steps='[{"burst": 99}]')
    )
    errors = response.context["adminform"].form.errors
    assert any("steps[0]" in e for e in errors["steps"])


def test_malformed_json_is_a_field_error(admin_client_, factory):
    response = admin_client_.post(
        reverse("admin:labs_scenario_add"), scenario_post(factory, policy="{not json")
    )
    assert response.status_code == 200
    assert "policy" in response.context["adminform"].form.errors


def test_scenario_change_form_shows_the_stored_script_parts(admin_client_, scenario):
    response = admin_client_.get(reverse("admin:labs_scenario_change", args=[scenario.pk]))
    form = response.context["adminform"].form
    assert form["seed"].value() == 7
    assert '"fail_count": 3' in form["dependency"].value()
    assert "Run in virtual time" in response.content.decode()


def test_editing_a_scenario_keeps_it_valid(admin_client_, scenario, factory):
    url = reverse("admin:labs_scenario_change", args=[scenario.pk])
    data = scenario_post(factory, slug="tour", title="The tour, again")
    assert admin_client_.post(url, data).status_code == 302
    scenario.refresh_from_db()
    assert scenario.title == "The tour, again"
    scenario.full_clean()


def test_run_in_virtual_time_action_shows_the_tour_results(admin_client_, scenario):
    response = admin_client_.post(
        reverse("admin:labs_scenario_changelist"),
        {"action": "run_in_virtual_time", "_selected_action": [scenario.pk]},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "[4, 1, 1, 1, 1, 1]" in body
    assert "[4, 4, 4, 0, 0, 0]" in body
    run = response.context["runs"][0]
    assert [(t["from"], t["to"]) for t in run.transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    assert run.transitions[-1]["call"] == 13
    assert [c["outcome"] for c in run.calls[9:12]] == ["rejected_open"] * 3


def _shipped_tour(scenario):
    scenario.script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    scenario.save()
    return scenario.script


def test_run_in_virtual_time_shows_the_expectations(admin_client_, scenario):
    _shipped_tour(scenario)
    response = admin_client_.get(reverse("admin:labs_scenario_run", args=[scenario.pk]))
    body = response.content.decode()
    run = response.context["runs"][0]
    assert len(run.checks) == 15 and run.checks_failed == 0  # 14 and the probe's situation
    assert "All 15 expectations met." in body
    assert "closed→open (call 9)" in body


def test_run_in_virtual_time_names_a_failed_expectation(admin_client_, scenario):
    script = _shipped_tour(scenario)
    script["steps"][2]["expect"] = {"dependency_hits": 24}
    scenario.script = script
    scenario.save()
    response = admin_client_.get(reverse("admin:labs_scenario_run", args=[scenario.pk]))
    body = response.content.decode()
    (failed,) = [c for c in response.context["runs"][0].checks if not c["ok"]]
    assert (failed["measure"], failed["expected"], failed["observed"]) == (
        "dependency_hits",
        24,
        12,
    )
    assert "1 of 10 expectations failed." in body and "FAILED" in body


def test_run_in_virtual_time_button_on_the_change_page(admin_client_, scenario):
    response = admin_client_.get(reverse("admin:labs_scenario_run", args=[scenario.pk]))
    assert response.status_code == 200
    assert response.context["runs"][0].ok


def test_instructor_can_view_and_run_scenarios_but_not_change_them(
    teacher_client, scenario, factory
):
    url = reverse("admin:labs_scenario_change", args=[scenario.pk])
    assert teacher_client.get(url).status_code == 200
    assert (
        teacher_client.get(reverse("admin:labs_scenario_run", args=[scenario.pk])).status_code
        == 200
    )
    response = teacher_client.post(url, scenario_post(factory, slug="tour", title="Changed"))
    assert response.status_code == 403
    scenario.refresh_from_db()
    assert scenario.title == "The tour"


def test_an_instructors_read_only_scenario_shows_its_dependency_policy_and_steps(
    teacher_client, scenario
):
    _shipped_tour(scenario)
    body = teacher_client.get(reverse("admin:labs_scenario_change", args=[scenario.pk]))
    text = body.content.decode()
    assert "&quot;mode&quot;: &quot;flaky&quot;" in text  # the dependency
    assert "&quot;failure_threshold&quot;: 3" in text  # the policy's breaker
    assert "Run a burst of 6 calls." in text and "Set the dependency to down." in text
    assert "&quot;dependency_hits&quot;: 12" in text  # a step's expectation
    assert "How many attempts reach it during these 6 calls?" in text  # a step's question


# --- steps as rows -------------------------------------------------------------------------


def _page_post(client, scenario) -> tuple[dict, list[dict]]:
    """The scenario's change page as the browser would post it back unchanged: the form's
    fields and, per step row, its fields (``step-<i>-<name>``)."""
    response = client.get(reverse("admin:labs_scenario_change", args=[scenario.pk]))
    form = response.context["adminform"].form
    data = {}
    for name in form.fields:
        value = form[name].value()
        if value is None:
            continue
        if name == "is_active":
            if value:
                data[name] = "on"
            continue
        data[name] = value
    rows = form.step_rows
    data.update(
        {
            f"step-{k}": v
            for k, v in {
                "TOTAL_FORMS": rows.total_form_count(),
                "INITIAL_FORMS": rows.initial_form_count(),
                "MIN_NUM_FORMS": 0,
                "MAX_NUM_FORMS": 100,
            }.items()
        }
    )
    row_values = []
    for i, row in enumerate(rows):
        values = {}
        for name in row.fields:
            value = row[name].value()
            if name == "DELETE" or value in (None, False):
                continue
            values[name] = value
        row_values.append(values)
        data.update({f"step-{i}-{k}": v for k, v in values.items()})
    return data, row_values


def _post_rows(client, scenario, data):
    return client.post(reverse("admin:labs_scenario_change", args=[scenario.pk]), data)


def _row_errors(response, index: int) -> dict:
    return response.context["adminform"].form.step_rows.forms[index].errors


def test_the_change_page_shows_each_step_as_a_row(admin_client_, scenario):
    script = _shipped_tour(scenario)
    _, rows = _page_post(admin_client_, scenario)
    assert len(rows) == len(script["steps"]) + 1  # and a blank row to add one
    down = rows[2]
    assert (down["action"], down["burst"]) == ("burst", 6)
    assert down["ask_measure"] == "dependency_hits"
    assert json.loads(down["expect"])["dependency_hits"] == 12
    assert rows[1]["action"] == "set_dependency" and json.loads(rows[1]["changes"]) == {
        "mode": "down"
    }
    body = admin_client_.get(reverse("admin:labs_scenario_change", args=[scenario.pk]))
    assert 'id="step-rows"' in body.content.decode()


def test_rows_saved_unchanged_but_one_value_round_trip_to_the_same_json(admin_client_, scenario):
    script = _shipped_tour(scenario)
    data, _ = _page_post(admin_client_, scenario)
    data["step-0-burst"] = "5"  # one edit in a row: the steps are rebuilt from the rows
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    scenario.refresh_from_db()
    expected = json.loads(json.dumps(script["steps"]))
    expected[0]["burst"] = 5
    assert scenario.script["steps"] == expected
    scenario.full_clean()


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_scenarios_steps_round_trip_through_rows(path):
    from labs.forms.back_office import StepRowForm

    steps = json.loads(path.read_text())["steps"]
    rebuilt = []
    for step in steps:
        unbound = StepRowForm(initial=StepRowForm.initial_for(step))
        values = {name: unbound[name].value() for name in unbound.fields}
        form = StepRowForm({k: "" if v is None else v for k, v in values.items()})
        assert form.is_valid(), form.errors
        rebuilt.append(form.step())
    assert json.dumps(rebuilt) == json.dumps(steps)


def test_a_bad_expect_measure_in_a_row_is_named_beside_its_field_with_the_allowed_measures(
    admin_client_, scenario
):
    script = _shipped_tour(scenario)
    data, _ = _page_post(admin_client_, scenario)
    data["step-2-expect"] = '{"attempts_spent": 12}'
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 200
    (message,) = _row_errors(response, 2)["expect"]
    assert "unknown measure" in message
    assert "breaker_after" in message and "dependency_hits" in message  # the allowed ones
    assert set(_row_errors(response, 2)) == {"expect"}
    assert not _row_errors(response, 0)
    assert "step row has a problem" in str(response.context["adminform"].form.non_field_errors())
    scenario.refresh_from_db()
    assert scenario.script == script  # nothing saved


def test_a_bad_value_in_a_row_is_shown_beside_its_field(admin_client_, scenario):
    script = _shipped_tour(scenario)
    data, _ = _page_post(admin_client_, scenario)
    data["step-0-burst"] = "99"
    data["step-2-ask_measure"] = "luck"
    data["step-2-ask_tolerance"] = "-1"
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 200
    (calls,) = _row_errors(response, 0)["burst"]
    assert "between 1 and 20 calls" in calls and "99" in calls
    (measure,) = _row_errors(response, 2)["ask_measure"]
    assert "dependency_hits" in measure and "'luck'" in measure
    assert "ask_tolerance" in _row_errors(response, 2)
    body = response.content.decode()
    assert "between 1 and 20 calls" in body  # rendered beside the row's field
    scenario.refresh_from_db()
    assert scenario.script == script


def test_a_row_is_added_moved_and_deleted(admin_client_, scenario):
    script = _shipped_tour(scenario)
    data, rows = _page_post(admin_client_, scenario)
    blank = len(rows) - 1
    data.update({f"step-{blank}-action": "wait_ms", f"step-{blank}-wait_ms": "2000",
                 f"step-{blank}-ORDER": "0"})  # fmt: skip
    data["step-1-DELETE"] = "on"
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    scenario.refresh_from_db()
    assert scenario.script["steps"] == [{"wait_ms": 2000}, script["steps"][0], *script["steps"][2:]]


def test_the_rows_and_the_raw_json_edited_in_one_save_are_refused(admin_client_, scenario):
    script = _shipped_tour(scenario)
    data, _ = _page_post(admin_client_, scenario)
    data["step-0-burst"] = "5"
    data["steps"] = json.dumps([{"burst": 3}])
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 200
    assert "both as rows and as raw JSON" in str(response.context["adminform"].form.errors["steps"])
    scenario.refresh_from_db()
    assert scenario.script == script


def test_raw_json_still_edits_the_steps_when_the_rows_are_posted_unchanged(
    admin_client_, scenario
):
    _shipped_tour(scenario)
    data, _ = _page_post(admin_client_, scenario)
    data["steps"] = json.dumps([{"burst": 3, "expect": {"calls": 3}}])
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    scenario.refresh_from_db()
    assert scenario.script["steps"] == [{"burst": 3, "expect": {"calls": 3}}]


def test_an_instructors_read_only_page_has_no_editable_rows(teacher_client, scenario):
    _shipped_tour(scenario)
    body = teacher_client.get(reverse("admin:labs_scenario_change", args=[scenario.pk]))
    assert body.status_code == 200
    assert 'id="step-rows"' not in body.content.decode()


# --- roster import ------------------------------------------------------------------------


ROSTER = "username,full name,email\nzoe,Zoe Zhang,zoe@example.com\nyan,Yan Yu,\n"


def roster_url(classroom, suffix=""):
    name = "admin:labs_classroom_roster" + ("_download" if suffix else "")
    return reverse(name, args=[classroom.pk])


def test_roster_import_creates_students_with_one_time_passwords(teacher_client, classroom):
    response = teacher_client.post(roster_url(classroom), {"csv_text": ROSTER})
    assert response.status_code == 200
    accounts = response.context["accounts"]
    assert [a.username for a in accounts] == ["zoe", "yan"]
    body = response.content.decode()
    User = get_user_model()
    for account in accounts:
        assert account.password in body
        user = User.objects.get(username=account.username)
        assert user.check_password(account.password)
        assert Membership.objects.get(user=user).classroom == classroom
        assert Membership.objects.get(user=user).role == Membership.Role.STUDENT
    zoe = User.objects.get(username="zoe")
    assert (zoe.first_name, zoe.last_name, zoe.email) == ("Zoe", "Zhang", "zoe@example.com")


def test_roster_import_accepts_an_uploaded_file(teacher_client, classroom):
    upload = io.BytesIO(("\ufeff" + ROSTER).encode("utf-8"))
    upload.name = "roster.csv"
    response = teacher_client.post(roster_url(classroom), {"csv_file": upload})
    assert [a.username for a in response.context["accounts"]] == ["zoe", "yan"]


def test_one_time_passwords_never_reach_the_database(teacher_client, classroom):
    from django.db import connection

    response = teacher_client.post(roster_url(classroom), {"csv_text": ROSTER})
    passwords = [a.password for a in response.context["accounts"]]
    session_blobs = [s.get_decoded() for s in Session.objects.all()]
    assert not any(p in repr(blob) for p in passwords for blob in session_blobs)
    tables = connection.introspection.table_names()
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (introspected names)
            dump = repr(cursor.fetchall())
            assert not any(p in dump for p in passwords), table


def test_one_time_passwords_download_once_as_csv(teacher_client, classroom):
    response = teacher_client.post(roster_url(classroom), {"csv_text": ROSTER})
    shown = {a.username: a.password for a in response.context["accounts"]}

    download = teacher_client.post(roster_url(classroom, "download"))
    assert download.status_code == 200
    assert download["Content-Type"].startswith("text/csv")
    assert "attachment" in download["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert {r["username"]: r["password"] for r in rows} == shown

    again = teacher_client.post(roster_url(classroom, "download"))
    assert again.status_code == 302


def test_roster_with_bad_lines_reports_each_line_and_imports_nothing(
    teacher_client, classroom, student
):
    roster = (
        "username,full name,email\n"
        "good1,Good One,good1@example.com\n"  # line 2: fine
        "bad name,Bad Name,bad@example.com\n"  # line 3: space in username
        "good2,Good Two,not-an-email\n"  # line 4: bad email
        "alice,Alice Again,\n"  # line 5: already taken (fixture student)
        "good1,Dup,\n"  # line 6: repeated in the file
        "only,two\n"  # line 7: wrong column count
    )
    response = teacher_client.post(roster_url(classroom), {"csv_text": roster})
    assert response.status_code == 200
    errors = response.context["form"].non_field_errors()
    for line in (3, 4, 5, 6, 7):
        assert any(e.startswith(f"Line {line}:") for e in errors), (line, errors)
    assert not any(e.startswith("Line 2:") for e in errors)
    assert not get_user_model().objects.filter(username__in=["good1", "good2"]).exists()
    assert "Nothing was imported" in response.content.decode()


def test_instructor_cannot_import_a_roster_into_another_class(teacher_client, other_classroom):
    response = teacher_client.post(roster_url(other_classroom), {"csv_text": ROSTER})
    assert response.status_code == 404
    assert not get_user_model().objects.filter(username="zoe").exists()


def test_another_instructor_cannot_download_the_passwords(
    teacher_client, classroom, client, other_instructor
):
    teacher_client.post(roster_url(classroom), {"csv_text": ROSTER})
    from django.test import Client

    other = Client()
    other.force_login(other_instructor)
    assert other.post(roster_url(classroom, "download")).status_code == 404


def test_classroom_change_page_links_to_roster_import(teacher_client, classroom):
    response = teacher_client.get(reverse("admin:labs_classroom_change", args=[classroom.pk]))
    assert roster_url(classroom) in response.content.decode()


def test_lab_session_list_shows_breaker_state(client, superuser, sessions):
    mine, _ = sessions
    LabSession.objects.filter(pk=mine.pk).update(breaker_snapshot={"state": "open"})
    client.force_login(superuser)
    body = client.get(reverse("admin:labs_labsession_changelist")).content.decode()
    assert 'class="breaker breaker-open"' in body


# --- the shared dependency in people's words; instructors as on the dashboard --------------


def shared_row(classroom, **values):
    from labs.models import SharedDependencyConfig

    return SharedDependencyConfig.objects.create(classroom=classroom, **values)


def test_the_shared_dependency_admin_speaks_in_peoples_words(client, superuser, classroom):
    client.force_login(superuser)
    index = client.get(reverse("admin:index")).content.decode()
    assert "Shared dependencies" in index and "Shared dependencys" not in index
    row = shared_row(classroom, servers=8, service_ms=40)
    listing = client.get(reverse("admin:labs_shareddependencyconfig_changelist"))
    text = listing.content.decode()
    for header in ("Service time (ms)", "Longest queue wait (ms)", "Capacity (servers / service"):
        assert header in text
    assert "200 attempts/s" in text
    page = client.get(reverse("admin:labs_shareddependencyconfig_change", args=[row.pk]))
    body = page.content.decode()
    assert "Service time (ms)" in body and "Longest queue wait (ms)" in body
    assert "Service ms" not in body and "Max queue ms" not in body
    assert "200 attempts/s" in body


def test_a_capacity_that_is_not_whole_reads_as_a_number():
    from labs.admin import capacity_words

    assert capacity_words(3 * 1000 / 240) == "12.5 attempts/s"
    assert capacity_words(1000.0) == "1,000 attempts/s"


def test_a_bad_value_is_refused_beside_its_field_in_the_fields_words(client, superuser, classroom):
    client.force_login(superuser)
    row = shared_row(classroom)
    url = reverse("admin:labs_shareddependencyconfig_change", args=[row.pk])
    response = client.post(url, {"servers": "8", "service_ms": "0", "max_queue_ms": "2000"})
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["service_ms"] == ["Must be between 1 and 2000 ms (got 0)"]
    body = response.content.decode()
    assert "service_ms:" not in body
    row.refresh_from_db()
    assert row.service_ms == 40  # nothing changed


def test_an_instructor_views_and_changes_their_classs_shared_dependency_in_the_admin(
    client, instructor, classroom, other_classroom
):
    mine, theirs = shared_row(classroom), shared_row(other_classroom)
    client.force_login(instructor)
    listing = client.get(reverse("admin:labs_shareddependencyconfig_changelist"))
    assert listing.status_code == 200
    assert [r.pk for r in listing.context["cl"].result_list] == [mine.pk]
    theirs_url = reverse("admin:labs_shareddependencyconfig_change", args=[theirs.pk])
    assert client.get(theirs_url).status_code == 404
    values = {"servers": "1", "service_ms": "1", "max_queue_ms": "0"}
    assert client.post(theirs_url, values).status_code == 404

    url = reverse("admin:labs_shareddependencyconfig_change", args=[mine.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, {"servers": "4", "service_ms": "20", "max_queue_ms": "500"})
    assert response.status_code == 302
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.servers, mine.service_ms, mine.max_queue_ms) == (4, 20, 500)
    assert (theirs.servers, theirs.service_ms) == (8, 40)
    # Saved through the service, as from the dashboard: journaled in the class's sessions.
    assert instructor.has_perm("labs.change_shareddependencyconfig")
    assert not instructor.has_perm("labs.delete_shareddependencyconfig")


def test_an_instructor_adds_a_shared_dependency_only_for_their_own_class(
    client, instructor, classroom, other_classroom
):
    from labs.models import SharedDependencyConfig

    client.force_login(instructor)
    add = reverse("admin:labs_shareddependencyconfig_add")
    page = client.get(add)
    assert page.status_code == 200
    choices = list(page.context["adminform"].form.fields["classroom"].queryset)
    assert choices == [classroom]
    refused = client.post(
        add,
        {"classroom": other_classroom.pk, "servers": "2", "service_ms": "10", "max_queue_ms": "0"},
    )
    assert refused.status_code == 200
    assert not SharedDependencyConfig.objects.filter(classroom=other_classroom).exists()
    done = client.post(
        add, {"classroom": classroom.pk, "servers": "2", "service_ms": "10", "max_queue_ms": "0"}
    )
    assert done.status_code == 302
    assert SharedDependencyConfig.objects.get(classroom=classroom).servers == 2


# --- class members chosen by name ------------------------------------------------------------


def autocomplete(client, term: str, model: str = "membership", field: str = "user"):
    return client.get(
        reverse("admin:autocomplete"),
        {"app_label": "labs", "model_name": model, "field_name": field, "term": term},
    )


def test_members_are_chosen_by_name_with_search(client, instructor, classroom, factory):
    factory.user("ann", first_name="Ann", last_name="Lee")
    factory.user("annex", is_staff=True)  # staff: not a student to enrol
    client.force_login(instructor)
    page = client.get(reverse("admin:labs_classroom_change", args=[classroom.pk]))
    body = page.content.decode()
    assert "admin-autocomplete" in body  # the member's select searches, no raw id box
    assert "vForeignKeyRawIdAdminField" not in body

    response = autocomplete(client, "Lee")
    assert response.status_code == 200
    assert [r["text"] for r in response.json()["results"]] == ["Ann Lee (ann)"]
    texts = [r["text"] for r in autocomplete(client, "ann").json()["results"]]
    assert texts == ["Ann Lee (ann)"]  # the staff account is not offered


def test_a_members_select_shows_their_name(client, instructor, classroom, factory):
    factory.student("ann", classroom)
    ann = get_user_model().objects.get(username="ann")
    ann.first_name, ann.last_name = "Ann", "Lee"
    ann.save()
    client.force_login(instructor)
    body = client.get(reverse("admin:labs_classroom_change", args=[classroom.pk])).content
    assert f'<option value="{ann.pk}" selected>Ann Lee (ann)</option>' in body.decode()


def test_the_user_admin_stays_closed_to_instructors(client, instructor):
    client.force_login(instructor)
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 403
    # Another field that points at users is not a member's: Django's own rule (403).
    assert autocomplete(client, "a", model="classfault", field="created_by").status_code == 403


def test_a_superuser_searches_every_account(client, superuser, factory):
    factory.user("ann", first_name="Ann", last_name="Lee")
    client.force_login(superuser)
    texts = [r["text"] for r in autocomplete(client, "r").json()["results"]]
    assert "root" in texts  # staff included for a superuser


def test_a_bad_seconds_to_come_back_in_a_row_is_shown_beside_it_and_nothing_saved(
    admin_client_, scenario
):
    scenario.script = json.loads((ROOT / "scenarios" / "find_the_edge.json").read_text())
    scenario.save()
    script = scenario.script
    data, rows = _page_post(admin_client_, scenario)
    assert rows[1]["ask_measure"] == "recovered" and rows[1]["ask_within_s"] == 20
    data["step-1-ask_within_s"] = "0"
    response = _post_rows(admin_client_, scenario, data)
    assert response.status_code == 200
    (message,) = _row_errors(response, 1)["ask_within_s"]
    assert message == (
        "the seconds the dependency has to come back after the trigger ends: must be a whole "
        "number from 1 to 120 (got 0)"
    )
    assert "within (s)" in response.content.decode()
    scenario.refresh_from_db()
    assert scenario.script == script  # nothing saved
