"""Class-wide services (labs.services.classroom): all or nothing, journaled with the
instructor's name, timed faults restored once from what the database saved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from labs.models import Burst, ClassFault, JournalEvent, LabSession
from labs.services import classroom as svc
from labs.services import lab
from labs.services.lab import SettingsInvalid
from labs.worker.tasks import restore_class_fault
from tests.conftest import make_scenario, make_student

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def scheduled(monkeypatch):
    """Restore tasks the services scheduled: (fault id, countdown)."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(
        svc, "_schedule_restore", lambda fid, countdown: calls.append((fid, countdown))
    )
    return calls


@pytest.fixture
def sessions(classroom, scenario, student):
    bob = make_student("bob_a", classroom)
    return [
        lab.session_open(user=student, classroom=classroom, scenario=scenario),
        lab.session_open(user=bob, classroom=classroom, scenario=scenario),
    ]


def modes(sessions) -> list[str]:
    return [LabSession.objects.get(pk=s.pk).dependency["mode"] for s in sessions]


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


# --- set every session's dependency -------------------------------------------------------------


def test_class_wide_mode_reaches_every_session_and_names_the_instructor(
    classroom, instructor, sessions, scheduled
):
    result = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}
    )
    assert sorted(result.changed) == sorted(s.pk for s in sessions)
    assert modes(sessions) == ["down", "down"]
    for session in sessions:
        row = JournalEvent.objects.get(session=session, kind="fault_injected")
        assert row.actor == instructor
        assert row.message.startswith("fault injected by teacher_a: down")
        assert "class-wide" in row.message
    assert not ClassFault.objects.exists()  # no duration: nothing to restore
    assert scheduled == []


def test_class_wide_mode_keeps_each_sessions_other_settings(
    classroom, instructor, sessions, scheduled
):
    alice, bob = sessions
    lab.session_set_dependency(session=alice, user=alice.owner, changes={"latency_ms": 40})
    svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "flaky", "fail_count": 2}
    )
    alice.refresh_from_db()
    bob.refresh_from_db()
    assert (alice.dependency["mode"], alice.dependency["fail_count"]) == ("flaky", 2)
    assert alice.dependency["latency_ms"] == 40
    assert bob.dependency["latency_ms"] == 5


@pytest.mark.parametrize(
    ("changes", "duration", "field", "text"),
    [
        ({"mode": "sideways"}, None, "dependency.mode", "must be one of"),
        ({"mode": "flaky", "fail_count": 0}, None, "dependency.fail_count", "between 1 and 100"),
        ({"mode": "down", "latency_ms": 5000}, None, "dependency.latency_ms", "between 0 and 2000"),
        ({"mode": "down"}, 0, "duration_s", "must be between 1 and 3600 s (got 0)"),
        ({"mode": "down"}, 3601, "duration_s", "must be between 1 and 3600 s (got 3601)"),
        ({"mode": "down"}, 2.5, "duration_s", "whole number of seconds between 1 and 3600"),
        ({"mode": "down"}, True, "duration_s", "whole number"),
        ({}, None, "dependency", "at least a mode"),
    ],
)
def test_invalid_mode_or_duration_is_refused_before_any_session_is_touched(
    classroom, instructor, sessions, scheduled, changes, duration, field, text
):
    rows_before = JournalEvent.objects.count()
    with pytest.raises(SettingsInvalid) as info:
        svc.classroom_set_dependency(
            classroom=classroom, user=instructor, changes=changes, duration_s=duration
        )
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems and text in problems[field]
    assert modes(sessions) == ["flaky", "flaky"]
    assert JournalEvent.objects.count() == rows_before
    assert not ClassFault.objects.exists() and scheduled == []


def test_invalid_mode_is_refused_even_in_a_class_without_sessions(classroom, instructor):
    with pytest.raises(SettingsInvalid):
        svc.classroom_set_dependency(classroom=classroom, user=instructor, changes={"mode": "x"})


@pytest.mark.parametrize("who", ["student", "other_instructor"])
def test_only_an_instructor_of_the_class_may_inject(request, classroom, sessions, scheduled, who):
    with pytest.raises(PermissionDenied):
        svc.classroom_set_dependency(
            classroom=classroom, user=request.getfixturevalue(who), changes={"mode": "down"}
        )
    assert modes(sessions) == ["flaky", "flaky"]


# --- timed faults ---------------------------------------------------------------------------------


def test_timed_fault_saves_previous_modes_and_schedules_its_restore(
    classroom, instructor, sessions, scheduled, django_capture_on_commit_callbacks
):
    alice, bob = sessions
    lab.session_set_dependency(session=bob, user=bob.owner, changes={"mode": "healthy"})
    with django_capture_on_commit_callbacks(execute=True):
        result = svc.classroom_set_dependency(
            classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=30
        )
    fault = result.fault
    assert scheduled == [(fault.pk, 30)]
    assert fault.status == ClassFault.Status.ACTIVE
    assert fault.sessions[str(alice.pk)]["previous"]["mode"] == "flaky"
    assert fault.sessions[str(bob.pk)]["previous"]["mode"] == "healthy"
    assert fault.sessions[str(bob.pk)]["applied"]["mode"] == "down"
    row = JournalEvent.objects.get(session=alice, kind="fault_injected")
    assert "class-wide, for 30 s" in row.message


def test_restore_brings_each_previous_mode_back_and_journals_it(
    classroom, instructor, sessions, scheduled
):
    alice, bob = sessions
    lab.session_set_dependency(session=bob, user=bob.owner, changes={"mode": "healthy"})
    fault = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=5
    ).fault
    result = svc.classroom_fault_restore(fault_id=fault.pk, now=later(5))
    assert sorted(result.changed) == sorted([alice.pk, bob.pk])
    assert modes(sessions) == ["flaky", "healthy"]
    for session in sessions:
        row = JournalEvent.objects.get(session=session, kind="fault_restored")
        assert "fault ended by teacher_a" in row.message
        assert "class-wide down for 5 s is over" in row.message
    fault.refresh_from_db()
    assert fault.status == ClassFault.Status.RESTORED and fault.finished_at


def test_restore_is_done_once_however_often_it_is_delivered(
    classroom, instructor, sessions, scheduled
):
    fault = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=1
    ).fault
    assert svc.classroom_fault_restore(fault_id=fault.pk, now=later(2)).changed
    assert svc.classroom_fault_restore(fault_id=fault.pk, now=later(3)).changed == []
    assert JournalEvent.objects.filter(kind="fault_restored").count() == 2  # one per session


def test_restore_before_its_time_does_nothing(classroom, instructor, sessions, scheduled):
    fault = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=60
    ).fault
    assert svc.classroom_fault_restore(fault_id=fault.pk).fault is None
    assert modes(sessions) == ["down", "down"]


def test_second_injection_supersedes_the_first_and_restores_the_original_modes(
    classroom, instructor, sessions, scheduled
):
    first = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=60
    ).fault
    second = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "error_rate", "rate": 0.5},
        duration_s=5,
    ).fault  # fmt: skip
    first.refresh_from_db()
    assert first.status == ClassFault.Status.SUPERSEDED
    # The first's restore, when its task fires, finds nothing to do.
    assert svc.classroom_fault_restore(fault_id=first.pk, now=later(61)).fault is None
    assert modes(sessions) == ["error_rate", "error_rate"]
    # The second puts back what was there before either fault: flaky, not down.
    svc.classroom_fault_restore(fault_id=second.pk, now=later(6))
    assert modes(sessions) == ["flaky", "flaky"]


def test_untimed_injection_cancels_a_running_timed_fault(
    classroom, instructor, sessions, scheduled
):
    timed = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=5
    ).fault
    svc.classroom_set_dependency(classroom=classroom, user=instructor, changes={"mode": "healthy"})
    assert svc.classroom_fault_restore(fault_id=timed.pk, now=later(6)).fault is None
    assert modes(sessions) == ["healthy", "healthy"]


def test_restore_keeps_a_dependency_the_student_changed_during_the_fault(
    classroom, instructor, sessions, scheduled
):
    alice, bob = sessions
    fault = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=5
    ).fault
    lab.session_set_dependency(
        session=LabSession.objects.get(pk=bob.pk), user=bob.owner, changes={"mode": "healthy"}
    )
    result = svc.classroom_fault_restore(fault_id=fault.pk, now=later(6))
    assert result.changed == [alice.pk]
    assert result.skipped == {bob.pk: "dependency changed since the fault"}
    assert modes(sessions) == ["flaky", "healthy"]
    kept = JournalEvent.objects.get(session=bob, kind="fault_restored")
    assert "stays as it is" in kept.message and kept.data["kept"] is True


def test_sweep_restores_faults_whose_time_has_passed(classroom, instructor, sessions, scheduled):
    svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=1
    )
    assert svc.classroom_faults_restore_due() == 0
    assert svc.classroom_faults_restore_due(now=later(2)) == 1
    assert modes(sessions) == ["flaky", "flaky"]


def test_restore_task_takes_an_id_and_calls_the_service(classroom, instructor, sessions, scheduled):
    fault = svc.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=1
    ).fault
    ClassFault.objects.filter(pk=fault.pk).update(restore_at=timezone.now())
    assert restore_class_fault(fault.pk) == 2
    assert restore_class_fault(fault.pk) == 0


def test_timed_fault_commits_its_restore_only_with_the_injection(
    classroom, instructor, sessions, django_capture_on_commit_callbacks, monkeypatch
):
    enqueued = []
    monkeypatch.setattr(
        "labs.live.enqueue.enqueue_fault_restore",
        lambda fault_id, countdown: enqueued.append(((fault_id,), countdown)),
    )
    monkeypatch.setattr("labs.services.lab._arm_dependency", lambda *a, **k: None)
    monkeypatch.setattr("labs.journal.broadcast.send_all", lambda pushes: None)
    with django_capture_on_commit_callbacks(execute=True):
        fault = svc.classroom_set_dependency(
            classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=7
        ).fault
    assert enqueued == [((fault.pk,), 7)]


# --- reset and scenarios ---------------------------------------------------------------------------


def test_reset_every_session_skips_and_reports_those_with_a_burst_running(
    classroom, instructor, sessions
):
    alice, bob = sessions
    svc.classroom_set_dependency(classroom=classroom, user=instructor, changes={"mode": "down"})
    Burst.objects.create(session=bob, number=1, size=3, status="queued")
    result = svc.classroom_reset(classroom=classroom, user=instructor)
    assert result.changed == [alice.pk]
    assert result.skipped == {bob.pk: "a burst is running"}
    assert modes(sessions) == ["flaky", "down"]
    row = JournalEvent.objects.get(session=alice, kind="session_reset")
    assert "teacher_a" in row.message and row.actor == instructor
    assert result.describe("reset") == "reset 1 session; 1 skipped (a burst is running)"


def test_reset_needs_an_instructor_of_the_class(classroom, other_instructor, sessions):
    with pytest.raises(PermissionDenied):
        svc.classroom_reset(classroom=classroom, user=other_instructor)
    assert not JournalEvent.objects.filter(kind="session_reset").exists()


def test_assigning_a_scenario_is_announced_in_every_session_once(classroom, instructor, sessions):
    storm = make_scenario("storm", title="Retry storm")
    result = svc.classroom_assign_scenario(classroom=classroom, user=instructor, scenario=storm)
    assert sorted(result.changed) == sorted(s.pk for s in sessions)
    assert classroom.scenarios.filter(pk=storm.pk).exists()
    rows = JournalEvent.objects.filter(kind="scenario_assigned")
    assert rows.count() == 2
    assert all("Retry storm" in r.message and "teacher_a" in r.message for r in rows)
    again = svc.classroom_assign_scenario(classroom=classroom, user=instructor, scenario=storm)
    assert again.changed == [] and rows.count() == 2


def test_inactive_scenario_cannot_be_assigned(classroom, instructor, sessions):
    retired = make_scenario("old", is_active=False)
    with pytest.raises(SettingsInvalid) as info:
        svc.classroom_assign_scenario(classroom=classroom, user=instructor, scenario=retired)
    assert info.value.problems[0].field == "scenario"
    assert not classroom.scenarios.filter(pk=retired.pk).exists()


def test_assigning_needs_an_instructor_of_the_class(classroom, student, sessions):
    with pytest.raises(PermissionDenied):
        svc.classroom_assign_scenario(
            classroom=classroom, user=student, scenario=make_scenario("x")
        )
