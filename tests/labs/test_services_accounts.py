"""Account services: join codes, sign-up, roster parsing and import (all or nothing).

Marked ``postgres``: scripts/test.py runs these once more against PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from labs.models import Classroom, LabSession, Membership
from labs.services.accounts import (
    JoinCodeError,
    RosterError,
    classroom_for_join_code,
    classroom_regenerate_join_code,
    generate_password,
    instructor_enrol,
    roster_accounts_csv,
    roster_import,
    roster_parse,
    student_signup,
)
from labs.services.lab import session_open

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_join_code_lookup_ignores_case_and_spaces(classroom):
    assert classroom_for_join_code(" classa01\n") == classroom


def test_unknown_join_code_raises_with_a_clear_message(classroom):
    with pytest.raises(JoinCodeError, match="No class has this join code"):
        classroom_for_join_code("ZZZZZZZZ")


def test_expired_join_code_raises_naming_the_expiry(classroom):
    classroom.join_code_expires_at = timezone.now() - timedelta(hours=1)
    classroom.save()
    with pytest.raises(JoinCodeError, match="expired on"):
        classroom_for_join_code("CLASSA01")


def test_student_signup_with_a_bad_code_creates_nothing(classroom):
    with pytest.raises(JoinCodeError):
        student_signup(username="ghost", password="x-long-password-1", join_code="BADBAD22")
    assert not get_user_model().objects.filter(username="ghost").exists()


def test_regenerated_join_code_replaces_the_old_one(classroom):
    new = classroom_regenerate_join_code(classroom=classroom)
    assert new != "CLASSA01"
    with pytest.raises(JoinCodeError):
        classroom_for_join_code("CLASSA01")
    assert classroom_for_join_code(new) == classroom


def test_instructor_enrol_makes_staff_in_the_group(classroom, factory):
    user = factory.user("tutor")
    instructor_enrol(user=user, classroom=classroom)
    user.refresh_from_db()
    assert user.is_staff and not user.is_superuser
    assert user.groups.filter(name="Instructors").exists()
    assert list(Classroom.objects.for_instructor(user)) == [classroom]


def test_generated_passwords_are_random_and_readable():
    passwords = {generate_password() for _ in range(100)}
    assert len(passwords) == 100
    sample = passwords.pop()
    assert len(sample) == 14 and sample.count("-") == 2


def test_roster_header_row_is_optional(db):
    rows = roster_parse("kim,Kim Kay,kim@example.com\n")
    assert [(r.username, r.first_name, r.last_name) for r in rows] == [("kim", "Kim", "Kay")]


def test_roster_blank_lines_are_skipped_and_line_numbers_kept(db):
    with pytest.raises(RosterError) as excinfo:
        roster_parse("username,full name,email\n\nkim,Kim Kay,\n\nbad user,X,\n")
    assert excinfo.value.errors == [
        "Line 5: the username 'bad user' may contain only letters, digits and @.+-_."
    ]


def test_empty_roster_is_an_error(db):
    with pytest.raises(RosterError, match="no student rows"):
        roster_parse("username,full name,email\n")


def test_roster_reports_every_bad_line_in_order(db):
    with pytest.raises(RosterError) as excinfo:
        roster_parse("a,,\nb b,B,\nc,C,nope\nd,D\n")
    assert [e.split(":")[0] for e in excinfo.value.errors] == [
        "Line 1",
        "Line 2",
        "Line 3",
        "Line 4",
    ]


def test_roster_import_is_all_or_nothing_when_a_name_is_taken_meanwhile(classroom, factory):
    rows_text = "p1,P One,\np2,P Two,\n"
    roster_parse(rows_text)  # fine now
    factory.user("p2")  # ...taken before the import writes
    with pytest.raises(RosterError):
        roster_import(classroom=classroom, text=rows_text)
    assert not get_user_model().objects.filter(username="p1").exists()


def test_roster_import_stores_only_password_hashes(classroom):
    accounts = roster_import(classroom=classroom, text="p1,P One,p1@example.com\n")
    user = get_user_model().objects.get(username="p1")
    assert accounts[0].password not in user.password
    assert user.check_password(accounts[0].password)


def test_roster_csv_neutralises_spreadsheet_formulas():
    text = roster_accounts_csv(
        [{"username": "u", "full_name": "=HYPERLINK(1)", "email": "", "password": "p"}]
    )
    assert "'=HYPERLINK(1)" in text


# --- session_open ---------------------------------------------------------------------------


def test_session_open_creates_the_session_from_the_scenario(student, classroom, scenario):
    session = session_open(user=student, classroom=classroom, scenario=scenario)
    assert session.seed == 7
    assert session.dependency["mode"] == "flaky"
    assert session.dependency["fail_count"] == 3
    assert session.policy["max_attempts"] == 4
    assert session.policy["breaker"]["failure_threshold"] == 3
    assert session.next_call_no == 1


def test_session_open_is_idempotent(student, classroom, scenario):
    first = session_open(user=student, classroom=classroom, scenario=scenario)
    second = session_open(user=student, classroom=classroom, scenario=scenario)
    assert first.pk == second.pk
    assert LabSession.objects.count() == 1


def test_session_open_refuses_a_non_member(classroom, scenario, factory):
    from django.core.exceptions import PermissionDenied

    outsider = factory.user("outsider")
    with pytest.raises(PermissionDenied):
        session_open(user=outsider, classroom=classroom, scenario=scenario)


def test_session_open_refuses_an_instructor(instructor, classroom, scenario):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        session_open(user=instructor, classroom=classroom, scenario=scenario)


def test_session_open_refuses_an_unassigned_scenario(student, classroom, factory):
    from django.core.exceptions import PermissionDenied

    other = factory.scenario("other")
    with pytest.raises(PermissionDenied):
        session_open(user=student, classroom=classroom, scenario=other)
    assert not Membership.objects.filter(user=student).exclude(classroom=classroom).exists()


# --- joining another class ------------------------------------------------------------------


def test_student_join_class_enrols_an_existing_student(student, other_classroom):
    from labs.services.accounts import student_join_class

    result = student_join_class(user=student, join_code=" classb02 ")
    assert result.classroom == other_classroom and result.joined
    membership = Membership.objects.get(user=student, classroom=other_classroom)
    assert membership.role == Membership.Role.STUDENT


def test_student_join_class_is_idempotent(student, classroom):
    from labs.services.accounts import student_join_class

    result = student_join_class(user=student, join_code="CLASSA01")
    assert result.classroom == classroom and not result.joined
    assert Membership.objects.filter(user=student).count() == 1


def test_student_join_class_refuses_unknown_and_expired_codes(student, other_classroom):
    from labs.services.accounts import student_join_class

    with pytest.raises(JoinCodeError, match="No class has this join code"):
        student_join_class(user=student, join_code="ZZZZZZZZ")
    other_classroom.join_code_expires_at = timezone.now() - timedelta(hours=1)
    other_classroom.save()
    with pytest.raises(JoinCodeError, match="expired on"):
        student_join_class(user=student, join_code="CLASSB02")
    assert not Membership.objects.filter(classroom=other_classroom).exists()


def test_student_join_class_refuses_instructors(instructor, other_classroom, classroom):
    from labs.services.accounts import student_join_class

    with pytest.raises(JoinCodeError, match="Instructors"):
        student_join_class(user=instructor, join_code="CLASSB02")
    # Their own class's code does not turn their instructor membership into a student one.
    with pytest.raises(JoinCodeError, match="Instructors"):
        student_join_class(user=instructor, join_code="CLASSA01")
    assert Membership.objects.get(user=instructor, classroom=classroom).role == "instructor"
    assert not Membership.objects.filter(user=instructor, classroom=other_classroom).exists()


def test_enrolling_an_instructor_recreates_a_deleted_instructors_group_with_its_permissions(
    classroom,
):
    from django.contrib.auth.models import Group

    from labs.services.accounts import INSTRUCTOR_PERMISSIONS, instructor_enrol
    from tests.conftest import make_user

    Group.objects.filter(name="Instructors").delete()
    teacher = make_user("newteacher")
    instructor_enrol(user=teacher, classroom=classroom)
    teacher = type(teacher).objects.get(pk=teacher.pk)
    assert teacher.has_perm("labs.change_classroom")
    granted = set(
        Group.objects.get(name="Instructors").permissions.values_list("codename", flat=True)
    )
    assert granted == set(INSTRUCTOR_PERMISSIONS)


def test_the_service_grants_what_the_groups_migrations_grant():
    import importlib

    from labs.services.accounts import INSTRUCTOR_PERMISSIONS

    migration = importlib.import_module("labs.migrations.0002_instructors_group")
    frozen = {f"{a}_{m}" for m, actions in migration.PERMISSIONS for a in actions}
    shared = importlib.import_module("labs.migrations.0009_instructors_shared_dependency_mark_bots")
    assert frozen | set(shared.CODENAMES) == set(INSTRUCTOR_PERMISSIONS)


def test_the_migrated_group_holds_every_permission_the_service_lists():
    from django.contrib.auth.models import Group

    from labs.services.accounts import INSTRUCTOR_PERMISSIONS

    granted = Group.objects.get(name="Instructors").permissions.values_list("codename", flat=True)
    assert set(granted) == set(INSTRUCTOR_PERMISSIONS)


def test_an_instructor_keeps_the_admin_rights_of_teaching_when_the_group_lost_its_permissions(
    classroom,
):
    """The admin follows the dashboard: teaching a class gives its instructor's admin rights
    (TeachingBackend), even with the Instructors group's permissions gone; nobody else gets
    them, and no permission beyond the instructor's list is granted."""
    from django.contrib.auth.models import Group

    from labs.services.accounts import instructor_enrol
    from tests.conftest import make_student, make_user

    teacher = make_user("keeps_rights")
    instructor_enrol(user=teacher, classroom=classroom)
    Group.objects.get(name="Instructors").permissions.clear()
    teacher = type(teacher).objects.get(pk=teacher.pk)
    assert teacher.has_perm("labs.view_shareddependencyconfig")
    assert teacher.has_perm("labs.change_classroom")
    assert teacher.has_module_perms("labs")
    assert not teacher.has_perm("labs.delete_classroom")
    assert not teacher.has_perm("auth.view_user")

    staff_not_teaching = make_user("staff_only")
    staff_not_teaching.is_staff = True
    staff_not_teaching.save()
    assert not staff_not_teaching.has_perm("labs.view_classroom")
    student = make_student("just_a_student", classroom)
    student.is_staff = True  # even staff: a student membership teaches nothing
    student.save()
    student = type(student).objects.get(pk=student.pk)
    assert not student.has_perm("labs.view_classroom")
    assert not student.has_module_perms("labs")
