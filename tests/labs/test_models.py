"""Models: database constraints (IntegrityError, not only form errors) and QuerySet methods.

Marked ``postgres``: scripts/test.sh runs these once more against PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from labs.models import (
    JOIN_CODE_ALPHABET,
    BreakerState,
    Burst,
    Classroom,
    JournalEvent,
    LabSession,
    Membership,
    Scenario,
    generate_join_code,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _integrity_error(fn) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        fn()


# --- Classroom ----------------------------------------------------------------------------


def test_generated_join_code_is_eight_uppercase_letters_or_digits():
    for _ in range(50):
        code = generate_join_code()
        assert len(code) == 8
        assert set(code) <= set(JOIN_CODE_ALPHABET)


def test_new_classroom_gets_a_join_code(factory):
    room = factory.classroom("Class X")
    assert len(room.join_code) == 8


def test_join_code_is_unique_in_the_database(factory):
    factory.classroom("A", join_code="SAMECODE")
    _integrity_error(lambda: factory.classroom("B", join_code="SAMECODE"))


def test_malformed_join_code_is_refused_by_the_database(factory):
    room = factory.classroom("A")
    # .update() skips save()'s normalisation, so only the CHECK constraint stands in the way.
    _integrity_error(lambda: Classroom.objects.filter(pk=room.pk).update(join_code="bad-code"))


def test_lowercase_join_code_is_normalised_on_save(factory):
    room = factory.classroom("A", join_code="abcd2345")
    room.refresh_from_db()
    assert room.join_code == "ABCD2345"


def test_join_code_without_expiry_never_expires(factory):
    room = factory.classroom("A")
    assert not room.join_code_is_expired()


def test_join_code_expires_at_its_expiry_time(factory):
    now = timezone.now()
    room = factory.classroom("A", join_code_expires_at=now)
    assert room.join_code_is_expired(now)
    assert not room.join_code_is_expired(now - timedelta(seconds=1))


def test_classrooms_for_instructor_are_only_their_own(classroom, other_classroom, instructor):
    assert list(Classroom.objects.for_instructor(instructor)) == [classroom]


def test_superuser_teaches_every_classroom(classroom, other_classroom, superuser):
    assert set(Classroom.objects.for_instructor(superuser)) == {classroom, other_classroom}


def test_classrooms_for_student_exclude_classes_they_teach(factory, classroom, other_classroom):
    user = factory.student("carol", classroom)
    Membership.objects.create(user=user, classroom=other_classroom, role=Membership.Role.INSTRUCTOR)
    assert list(Classroom.objects.for_student(user)) == [classroom]
    assert list(Classroom.objects.for_instructor(user)) == [other_classroom]


# --- Membership ---------------------------------------------------------------------------


def test_one_membership_per_user_and_classroom(student, classroom):
    _integrity_error(
        lambda: Membership.objects.create(
            user=student, classroom=classroom, role=Membership.Role.INSTRUCTOR
        )
    )


def test_membership_role_must_be_a_known_role(factory, classroom):
    user = factory.user("dave")
    _integrity_error(
        lambda: Membership.objects.create(user=user, classroom=classroom, role="janitor")
    )


# --- Scenario -----------------------------------------------------------------------------


def test_scenario_slug_is_unique(factory):
    factory.scenario("tour")
    _integrity_error(lambda: factory.scenario("tour"))


def test_valid_scenario_script_passes_full_clean(factory):
    scenario = Scenario(slug="ok", title="OK", script=factory.tour_script(name="ok"))
    scenario.full_clean()


def test_invalid_scenario_script_is_refused_by_full_clean_naming_the_field(factory):
    script = factory.tour_script(name="bad")
    script["policy"]["max_attempts"] = 9
    scenario = Scenario(slug="bad", title="Bad", script=script)
    with pytest.raises(ValidationError) as excinfo:
        scenario.full_clean()
    messages = excinfo.value.message_dict["script"]
    assert any("policy.max_attempts" in m for m in messages)


def test_scenario_script_must_be_an_object():
    scenario = Scenario(slug="list", title="List", script=[1, 2])
    with pytest.raises(ValidationError):
        scenario.full_clean()


def test_active_scenarios_queryset(factory):
    active = factory.scenario("a")
    factory.scenario("b", is_active=False)
    assert list(Scenario.objects.active()) == [active]


def test_scenario_in_use_cannot_be_deleted(student, classroom, scenario, factory):
    from django.db.models import ProtectedError

    factory.session(student, classroom, scenario)
    with pytest.raises(ProtectedError):
        scenario.delete()


# --- LabSession ---------------------------------------------------------------------------


def test_one_session_per_student_classroom_and_scenario(student, classroom, scenario, factory):
    factory.session(student, classroom, scenario)
    _integrity_error(lambda: factory.session(student, classroom, scenario))


def test_same_student_may_have_a_session_per_classroom(
    student, classroom, other_classroom, scenario, factory
):
    factory.session(student, classroom, scenario)
    factory.session(student, other_classroom, scenario)
    assert LabSession.objects.filter(owner=student).count() == 2


def test_session_defaults(student, classroom, scenario, factory):
    session = factory.session(student, classroom, scenario)
    assert session.next_call_no == 1
    assert session.next_seq == 1
    assert session.burst_count == 0
    assert session.breaker_snapshot == {}
    assert session.breaker_state == BreakerState.CLOSED


def test_session_next_call_no_cannot_be_zero(student, classroom, scenario, factory):
    session = factory.session(student, classroom, scenario)
    _integrity_error(lambda: LabSession.objects.filter(pk=session.pk).update(next_call_no=0))


def test_sessions_visible_to_owner_instructor_and_superuser_only(
    student,
    other_student,
    classroom,
    other_classroom,
    scenario,
    instructor,
    other_instructor,
    superuser,
    factory,
):
    mine = factory.session(student, classroom, scenario)
    theirs = factory.session(other_student, other_classroom, scenario)
    assert list(LabSession.objects.visible_to(student)) == [mine]
    assert list(LabSession.objects.visible_to(instructor)) == [mine]
    assert list(LabSession.objects.visible_to(other_instructor)) == [theirs]
    assert set(LabSession.objects.visible_to(superuser)) == {mine, theirs}


def test_sessions_are_invisible_to_anonymous_users(student, classroom, scenario, factory):
    from django.contrib.auth.models import AnonymousUser

    factory.session(student, classroom, scenario)
    assert not LabSession.objects.visible_to(AnonymousUser()).exists()


def test_classmate_cannot_see_another_students_session(student, classroom, scenario, factory):
    classmate = factory.student("erin", classroom)
    factory.session(student, classroom, scenario)
    assert not LabSession.objects.visible_to(classmate).exists()


# --- Burst --------------------------------------------------------------------------------


@pytest.fixture
def session(student, classroom, scenario, factory):
    return factory.session(student, classroom, scenario)


def test_burst_number_is_unique_per_session(session):
    Burst.objects.create(session=session, number=1, size=6, status=Burst.Status.DONE)
    _integrity_error(
        lambda: Burst.objects.create(session=session, number=1, size=6, status=Burst.Status.DONE)
    )


def test_only_one_active_burst_per_session(session):
    Burst.objects.create(session=session, number=1, size=6, status=Burst.Status.RUNNING)
    _integrity_error(
        lambda: Burst.objects.create(session=session, number=2, size=6, status=Burst.Status.QUEUED)
    )


def test_finished_bursts_do_not_block_a_new_one(session):
    Burst.objects.create(session=session, number=1, size=6, status=Burst.Status.DONE)
    Burst.objects.create(session=session, number=2, size=6, status=Burst.Status.INTERRUPTED)
    Burst.objects.create(session=session, number=3, size=6, status=Burst.Status.QUEUED)
    assert session.bursts.count() == 3


@pytest.mark.parametrize("size", [0, 21])
def test_burst_size_outside_1_to_20_is_refused(session, size):
    _integrity_error(lambda: Burst.objects.create(session=session, number=1, size=size))


@pytest.mark.parametrize("concurrency", [0, 11])
def test_burst_concurrency_outside_1_to_10_is_refused(session, concurrency):
    _integrity_error(
        lambda: Burst.objects.create(session=session, number=1, size=5, concurrency=concurrency)
    )


def test_burst_status_must_be_known(session):
    _integrity_error(
        lambda: Burst.objects.create(session=session, number=1, size=5, status="exploded")
    )


# --- JournalEvent -------------------------------------------------------------------------


def test_journal_sequence_number_is_unique_per_session(session):
    JournalEvent.objects.create(session=session, seq=1, kind="burst_start")
    _integrity_error(lambda: JournalEvent.objects.create(session=session, seq=1, kind="attempt"))


def test_journal_sequence_numbers_may_repeat_across_sessions(
    session, other_student, other_classroom, scenario, factory
):
    other = factory.session(other_student, other_classroom, scenario)
    JournalEvent.objects.create(session=session, seq=1, kind="burst_start")
    JournalEvent.objects.create(session=other, seq=1, kind="burst_start")


def test_journal_reads_newest_first_by_default(session):
    for seq in (1, 2, 3):
        JournalEvent.objects.create(session=session, seq=seq, kind="attempt")
    assert [e.seq for e in session.journal.all()] == [3, 2, 1]


def test_journal_after_replays_oldest_first(session):
    for seq in (1, 2, 3, 4):
        JournalEvent.objects.create(session=session, seq=seq, kind="attempt")
    assert [e.seq for e in session.journal.after(2)] == [3, 4]
    assert [e.seq for e in session.journal.newest(2)] == [4, 3]


def test_journal_has_a_newest_first_index_on_session_and_seq():
    index_names = {index.name: index for index in JournalEvent._meta.indexes}
    assert index_names["journal_session_seq_desc"].fields == ["session", "-seq"]


def test_journal_sequence_number_zero_is_refused(session):
    _integrity_error(lambda: JournalEvent.objects.create(session=session, seq=0, kind="attempt"))


# --- Schema ---------------------------------------------------------------------------------


def test_migrations_match_the_models():
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("makemigrations", "labs", "--check", "--dry-run", stdout=out)


def test_instructors_group_has_the_class_permissions():
    from django.contrib.auth.models import Group

    group = Group.objects.get(name="Instructors")
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert {"view_classroom", "change_classroom", "add_membership", "view_labsession"} <= codenames
    assert "delete_classroom" not in codenames
    assert not any(c.endswith("_user") for c in codenames)


def test_breaker_state_choices_are_the_engines_states_and_labels():
    from labs.engine.breaker import STATE_LABELS

    assert BreakerState.choices == list(STATE_LABELS.items())
    assert BreakerState.HALF_OPEN == "half_open"
