"""The class's shared dependency: its settings (service, instructor's form, admin), each
refused with the field and its range and nothing changed; triggers fired through the real
Redis model and journaled in every session, a replacing trigger saying so."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labs.live import runtime
from labs.models import JournalEvent, SharedDependencyConfig
from labs.services import lab
from labs.services import shared as svc
from labs.services.lab import SettingsInvalid
from tests.conftest import make_student

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_shared_model")]

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sessions(classroom, scenario, student):
    bob = make_student("bob_a", classroom)
    return [
        lab.session_open(user=student, classroom=classroom, scenario=scenario),
        lab.session_open(user=bob, classroom=classroom, scenario=scenario),
    ]


def kinds(session, kind):
    return list(JournalEvent.objects.filter(session=session, kind=kind).order_by("seq"))


# --- settings through the service ------------------------------------------------------------


def test_defaults_are_the_engines_limits(classroom):
    from labs.engine import LIMITS

    config = runtime.shared_config(classroom.pk).to_dict()
    assert config == {name: LIMITS[f"shared.{name}"].default for name in config}
    assert set(config) == set(svc.SHARED_FIELDS)
    assert not runtime.shared_config(classroom.pk).defended


def test_set_saves_journals_every_session_and_configures_redis(
    classroom, instructor, sessions, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        svc.classroom_set_shared(
            classroom=classroom, user=instructor, values={"servers": 3, "service_ms": 100}
        )
    row = SharedDependencyConfig.objects.get(classroom=classroom)
    assert (row.servers, row.service_ms, row.max_queue_ms) == (3, 100, 2000)
    for session in sessions:
        (entry,) = kinds(session, "shared_set")
        assert entry.actor_id == instructor.pk
        assert "3 servers x 100 ms" in entry.message
    model = runtime.shared_model(classroom.pk)
    assert model.config == runtime.shared_config(classroom.pk)
    assert (model.config.servers, model.config.service_ms) == (3, 100)


def test_the_server_s_defences_are_saved_journaled_and_reach_redis_then_turn_off(
    classroom, instructor, sessions, django_capture_on_commit_callbacks
):
    on = {"rate_per_s": 150.5, "rate_burst": 20, "queue_limit": 40, "concurrency_limit": 30,
          "codel_target_ms": 25, "codel_interval_ms": 200}  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        svc.classroom_set_shared(classroom=classroom, user=instructor, values=on)
    row = SharedDependencyConfig.objects.get(classroom=classroom)
    assert {k: getattr(row, k) for k in on} == on
    model = runtime.shared_model(classroom.pk)
    assert {k: getattr(model.config, k) for k in on} == on
    (entry,) = kinds(sessions[0], "shared_set")
    assert "rate limit 150.5 attempts/s (burst 20)" in entry.message
    assert "at most 40 waiting" in entry.message and "at most 30 in the server" in entry.message
    assert "CoDel sheds a wait over 25 ms once waits stay over it for 200 ms" in entry.message
    # the panel's read of the model says the same (the page's figures come from it)
    assert runtime.shared_now(classroom.pk, back_s=2)["model"]["config"]["queue_limit"] == 40
    with django_capture_on_commit_callbacks(execute=True):
        svc.classroom_set_shared(
            classroom=classroom, user=instructor, values={"rate_per_s": None, "queue_limit": None}
        )
    assert (model.config.rate_per_s, model.config.queue_limit) == (None, None)
    assert model.config.concurrency_limit == 30
    assert runtime.shared_config(classroom.pk) == model.config


@pytest.mark.parametrize(
    ("values", "field", "range_text"),
    [
        ({"servers": 65}, "servers", "between 1 and 64"),
        ({"servers": 0}, "servers", "between 1 and 64"),
        ({"service_ms": 2001}, "service_ms", "between 1 and 2000"),
        ({"max_queue_ms": -1}, "max_queue_ms", "between 0 and 10000"),
        ({"servers": "many"}, "servers", "between 1 and 64"),
        ({"rate_per_s": 0}, "rate_per_s", "null (off) or between 0.1 and 100000 attempts/s"),
        ({"rate_burst": 0}, "rate_burst", "between 1 and 10000 attempts"),
        ({"queue_limit": 0}, "queue_limit", "between 1 and 100000 attempts"),
        ({"concurrency_limit": 1001}, "concurrency_limit", "between 1 and 1000 attempts"),
        ({"codel_target_ms": 5001}, "codel_target_ms", "between 1 and 5000 ms"),
        ({"codel_interval_ms": 1}, "codel_interval_ms", "between 10 and 10000 ms"),
    ],
)
def test_bad_settings_are_refused_naming_field_and_range(
    classroom, instructor, sessions, values, field, range_text
):
    with pytest.raises(SettingsInvalid) as info:
        svc.classroom_set_shared(classroom=classroom, user=instructor, values=values)
    (problem,) = info.value.problems
    assert problem.field == field
    assert range_text in problem.message
    assert not SharedDependencyConfig.objects.exists()
    assert not JournalEvent.objects.filter(kind="shared_set").exists()


def test_only_the_classes_instructor_may_set_it(classroom, other_instructor, student):
    for user in (other_instructor, student):
        with pytest.raises(PermissionDenied):
            svc.classroom_set_shared(classroom=classroom, user=user, values={"servers": 2})
    assert not SharedDependencyConfig.objects.exists()


# --- the instructor's form on the dashboard ------------------------------------------------------


def test_dashboard_form_sets_it_and_refuses_out_of_range(client, classroom, instructor, sessions):
    client.force_login(instructor)
    page = client.get(reverse("labs:class_dashboard", args=[classroom.pk]))
    assert b'id="shared-form"' in page.content and b'id="trigger-form"' in page.content
    url = reverse("labs:class_set_shared", args=[classroom.pk])
    refused = client.post(url, {"servers": "99", "service_ms": "40"}, **HTMX)
    assert refused.status_code == 422
    assert b"servers" in refused.content and b"between 1 and 64" in refused.content
    assert not SharedDependencyConfig.objects.exists()
    ok = client.post(url, {"servers": "4", "service_ms": "50", "max_queue_ms": "500"}, **HTMX)
    assert ok.status_code == 200
    row = SharedDependencyConfig.objects.get(classroom=classroom)
    assert (row.servers, row.service_ms, row.max_queue_ms) == (4, 50, 500)


def test_dashboard_form_sets_the_defences_names_them_in_words_and_blank_turns_one_off(
    client, classroom, instructor, sessions
):
    client.force_login(instructor)
    url = reverse("labs:class_set_shared", args=[classroom.pk])
    refused = client.post(url, {"queue_limit": "0", "codel_target_ms": "9000"}, **HTMX)
    assert refused.status_code == 422
    text = refused.content.decode()
    assert "Queue limit (attempts waiting): must be blank (off) or between 1 and 100000" in text
    assert "CoDel target wait (ms): must be blank (off) or between 1 and 5000 ms" in text
    assert "queue_limit" not in text and "null" not in text
    assert not SharedDependencyConfig.objects.exists()
    ok = client.post(url, {"rate_per_s": "120", "queue_limit": "25"}, **HTMX)
    assert ok.status_code == 200
    assert "rate limit 120 attempts/s (burst 10); at most 25 waiting" in ok.content.decode()
    row = SharedDependencyConfig.objects.get(classroom=classroom)
    assert (row.rate_per_s, row.queue_limit) == (120, 25)
    page = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert 'id="shared-defences" open' in page and 'id="shared-queue_limit" value="25"' in page
    # every field posted as the form posts it, the queue limit cleared: that one goes off
    posted = {"servers": "8", "service_ms": "40", "max_queue_ms": "2000", "rate_per_s": "120",
              "rate_burst": "10", "queue_limit": "", "concurrency_limit": "",
              "codel_target_ms": "", "codel_interval_ms": "100"}  # fmt: skip
    assert client.post(url, posted, **HTMX).status_code == 200
    row.refresh_from_db()
    assert (row.rate_per_s, row.queue_limit) == (120, None)


def test_dashboard_form_sets_an_adaptive_concurrency_limit_in_words(
    client, classroom, instructor, sessions, django_capture_on_commit_callbacks
):
    client.force_login(instructor)
    page = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert '<option value="aimd">AIMD: cut by slow answers, + 1 while half is used</option>' in page
    assert "one of fixed, aimd, gradient" not in page
    url = reverse("labs:class_set_shared", args=[classroom.pk])
    refused = client.post(url, {"concurrency": "aimd"}, **HTMX)
    assert refused.status_code == 422
    assert (
        "Concurrency limit (attempts in the server): is needed for an adaptive limit to start "
        "from: between 1 and 200 attempts"
    ) in refused.content.decode()
    assert not SharedDependencyConfig.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        ok = client.post(url, {"concurrency": "aimd", "concurrency_limit": "20"}, **HTMX)
    assert ok.status_code == 200
    assert (
        "an adaptive limit on attempts in the server (AIMD, slow past 500 ms), from 20 up to 200"
    ) in ok.content.decode()
    model = runtime.shared_model(classroom.pk)
    assert (model.config.concurrency, model.config.concurrency_limit) == ("aimd", 20)
    assert model.state()["limit_now"] == 20


def test_a_student_cannot_post_the_form(client, classroom, student):
    client.force_login(student)
    response = client.post(reverse("labs:class_set_shared", args=[classroom.pk]), {"servers": 2})
    assert response.status_code == 404
    assert not SharedDependencyConfig.objects.exists()


# --- the admin ----------------------------------------------------------------------------


def test_admin_shows_the_engines_range_beside_the_field(client, superuser, classroom, sessions):
    client.force_login(superuser)
    add = reverse("admin:labs_shareddependencyconfig_add")
    data = {"classroom": classroom.pk, "servers": "70", "service_ms": "0", "max_queue_ms": "10",
            "rate_burst": "10", "codel_interval_ms": "100", "queue_limit": "0"}  # fmt: skip
    response = client.post(add, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any("between 1 and 64" in e for e in errors["servers"])
    assert any("between 1 and 2000" in e for e in errors["service_ms"])
    assert "max_queue_ms" not in errors
    assert errors["queue_limit"] == ["Must be blank (off) or between 1 and 100000 attempts (got 0)"]
    assert not SharedDependencyConfig.objects.exists()
    response = client.post(add, {**data, "servers": "6", "service_ms": "30", "queue_limit": "12"})
    assert response.status_code == 302
    row = SharedDependencyConfig.objects.get(classroom=classroom)
    assert (row.servers, row.service_ms, row.max_queue_ms, row.queue_limit) == (6, 30, 10, 12)
    assert all(kinds(s, "shared_set") for s in sessions)
    change = reverse("admin:labs_shareddependencyconfig_change", args=[row.pk])
    kept = {"rate_burst": "10", "codel_interval_ms": "100"}
    response = client.post(
        change, {"servers": "65", "service_ms": "30", "max_queue_ms": "10", **kept}
    )
    assert response.status_code == 200
    assert any(
        "between 1 and 64" in e for e in response.context["adminform"].form.errors["servers"]
    )
    response = client.post(
        change, {"servers": "2", "service_ms": "30", "max_queue_ms": "10", **kept}
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.servers == 2 and SharedDependencyConfig.objects.count() == 1
    assert row.queue_limit is None  # left blank in the change form: off
    assert runtime.shared_config(classroom.pk).servers == 2


def test_the_admin_sets_the_queue_order_and_refuses_newest_first_with_codel(
    client, superuser, classroom, sessions
):
    client.force_login(superuser)
    row = SharedDependencyConfig.objects.create(classroom=classroom)
    change = reverse("admin:labs_shareddependencyconfig_change", args=[row.pk])
    page = client.get(change).content.decode()
    assert "Queue order" in page and "newest first (LIFO)" in page
    base = {"servers": "8", "service_ms": "40", "max_queue_ms": "2000", "chain_order": "even"}
    refused = client.post(change, {**base, "discipline": "lifo", "codel_target_ms": "5"})
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["discipline"] == [
        "Must be fifo (first come, first served) while CoDel is on: it decides on the wait an "
        "attempt has at its arrival, which only a FIFO queue knows then (got lifo)"
    ]
    row.refresh_from_db()
    assert (row.discipline, row.codel_target_ms) == ("fifo", None)
    saved = client.post(change, {**base, "discipline": "adaptive_lifo", "lifo_after_ms": "250"})
    assert saved.status_code == 302
    config = runtime.shared_config(classroom.pk)
    assert (config.discipline, config.lifo_after_ms) == ("adaptive_lifo", 250)


def test_an_instructor_sees_only_their_classes_row_in_the_admin(
    client, classroom, other_classroom, instructor, other_instructor
):
    from django.contrib.auth.models import Permission

    for user in (instructor, other_instructor):
        user.is_staff = True
        user.save()
        user.user_permissions.add(
            *Permission.objects.filter(codename__endswith="shareddependencyconfig")
        )
    mine = SharedDependencyConfig.objects.create(classroom=classroom)
    client.force_login(other_instructor)
    response = client.get(reverse("admin:labs_shareddependencyconfig_change", args=[mine.pk]))
    assert response.status_code == 404


# --- triggers ------------------------------------------------------------------------------


def test_trigger_reaches_the_redis_model_and_every_journal(classroom, instructor, sessions):
    fired = svc.classroom_fire_trigger(
        classroom=classroom, user=instructor, values={"kind": "down", "duration_ms": 60000}
    )
    assert fired["replaced"] is None and fired["sessions"] == 2
    state = runtime.shared_model(classroom.pk).state()
    assert state["trigger"]["kind"] == "down"
    for session in sessions:
        (entry,) = kinds(session, "shared_trigger")
        assert "down" in entry.message and "replaces" not in entry.message
        assert entry.data["trigger"]["kind"] == "down"


def test_a_trigger_while_another_runs_replaces_it_and_says_so_everywhere(
    classroom, instructor, sessions
):
    svc.classroom_fire_trigger(
        classroom=classroom, user=instructor, values={"kind": "down", "duration_ms": 60000}
    )
    fired = svc.classroom_fire_trigger(
        classroom=classroom,
        user=instructor,
        values={"kind": "slow", "factor": 4, "duration_ms": 5000},
    )
    assert fired["replaced"]["kind"] == "down"
    assert runtime.shared_model(classroom.pk).state()["trigger"]["kind"] == "slow"
    for session in sessions:
        _first, second = kinds(session, "shared_trigger")
        assert "replaces the running down trigger" in second.message
        assert second.data["replaced"]["kind"] == "down"


@pytest.mark.parametrize(
    ("values", "field", "range_text"),
    [
        ({"kind": "melt"}, "trigger.kind", "one of down, slow, capacity"),
        ({"kind": "down", "duration_ms": 50}, "trigger.duration_ms", "between 100 and 600000"),
        ({"kind": "slow", "factor": 30}, "trigger.factor", "between 1 and 20"),
        ({"kind": "capacity", "servers": 8}, "trigger.servers", "between 0 and 7"),
    ],
)
def test_bad_triggers_are_refused_and_nothing_fires(
    client, classroom, instructor, sessions, values, field, range_text
):
    with pytest.raises(SettingsInvalid) as info:
        svc.classroom_fire_trigger(classroom=classroom, user=instructor, values=values)
    assert any(p.field == field and range_text in p.message for p in info.value.problems)
    assert runtime.shared_model(classroom.pk).state()["trigger"] is None
    assert not JournalEvent.objects.filter(kind="shared_trigger").exists()
    client.force_login(instructor)
    response = client.post(
        reverse("labs:class_fire_trigger", args=[classroom.pk]),
        {k: str(v) for k, v in values.items()},
        **HTMX,
    )
    assert response.status_code == 422
    assert range_text.encode() in response.content


def test_the_page_s_chart_events_keep_what_the_share_of_the_load_needs(classroom):
    """A shared attempt's chart event (what the lab page loads, beside the pushed rows) keeps
    the outcome the client saw, the arrival and the arrival second's offered count."""
    from labs.engine import SharedConfig
    from labs.presenters.lab_page import chart_payload

    model = runtime.configure_shared(classroom.pk, SharedConfig(servers=1, service_ms=5))
    first, second = model.decide(), model.decide(timeout_us=1)
    assert second.outcome == "timeout"
    for decision in (first, second):
        event = chart_payload({"seq": 1, "kind": "attempt", "data": decision.to_dict()})
        assert event["data"] == {
            "outcome": decision.outcome,
            "arrival_us": decision.arrival_us,
            "second_offered": decision.second_offered,
        }
