"""The open sockets' rights, re-checked together (labs.consumers.base.check_rights): the
batched answers agree with the one-socket reads they replace, and the number of queries does
not grow with the number of sockets."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from labs.consumers.base import _Right, check_rights
from labs.models import Membership
from labs.selectors.access import signed_in_many, socket_session, teaching, watchable_sessions
from labs.services import launch_token as tokens
from tests.conftest import make_classroom, make_instructor, make_session, make_student, make_user

pytestmark = pytest.mark.django_db


def session_key(user) -> str:
    client = Client()
    client.force_login(user)
    return client.session.session_key


def test_the_lab_pages_right_agrees_with_the_socket_read_for_every_kind_of_user(scenario):
    room, other = make_classroom("A"), make_classroom("B")
    owner, classmate = make_student("owner", room), make_student("classmate", room)
    teacher, stranger = make_instructor("teacher", room), make_instructor("stranger", other)
    removed = make_student("removed", room)
    admin = make_user("admin", is_superuser=True, is_staff=True)
    session = make_session(owner, room, scenario)
    removed_session = make_session(removed, room, scenario)
    Membership.objects.filter(user=removed, classroom=room).delete()
    users = [owner, classmate, teacher, stranger, removed, admin]
    watchers = [(u, s.pk) for u in users for s in (session, removed_session)]
    watchers.append((owner, 999_999))  # a session that is gone

    expected = [socket_session(user, session_id) is not None for user, session_id in watchers]
    assert watchable_sessions(watchers) == expected
    # what the expectation says, read plainly: the owner and the class's teacher and the
    # superuser may watch; a classmate, another class's teacher and a removed student not
    assert expected[:2] == [True, False]  # the owner; the removed student's session
    assert expected[2:4] == [False, False]  # a classmate
    assert expected[4:6] == [True, True]  # the teacher
    assert expected[6:8] == [False, False]  # another class's teacher
    assert expected[8:10] == [False, False]  # the removed student, even their own session
    assert expected[10:12] == [True, True]  # the superuser
    assert expected[12] is False


def test_logins_end_with_a_logout_a_deactivation_or_someone_else_signing_in(classroom):
    alice, bob, carol = (make_student(name, classroom) for name in ("alice", "bob", "carol"))
    keys = {user: session_key(user) for user in (alice, bob, carol)}
    logins = [(keys[alice], alice.pk), (keys[bob], bob.pk), (keys[carol], carol.pk),
              (keys[alice], bob.pk), (None, alice.pk), ("no-such-key", alice.pk)]  # fmt: skip
    assert signed_in_many(logins) == [True, True, True, False, False, False]

    Session.objects.filter(session_key=keys[bob]).delete()  # what a logout does to the row
    carol.is_active = False
    carol.save(update_fields=["is_active"])
    assert signed_in_many(logins) == [True, False, False, False, False, False]


def test_a_check_of_many_sockets_costs_what_a_check_of_one_does(classroom, scenario):
    teacher = make_instructor("teacher", classroom)

    def rights(n: int) -> list[_Right]:
        out = []
        for i in range(n):
            student = make_student(f"s{n}-{i}", classroom)
            session = make_session(student, classroom, scenario)
            out.append(_Right(watchable_sessions, session.pk, student, student.pk,
                              session_key(student), None))  # fmt: skip
        out.append(_Right(teaching, classroom.pk, teacher, teacher.pk, session_key(teacher), None))
        return out

    few, many = rights(1), rights(25)
    with CaptureQueriesContext(connection) as one:
        assert check_rights(few) == [True, True]
    with CaptureQueriesContext(connection) as all_of_them:
        assert check_rights(many) == [True] * 26
    assert len(all_of_them) == len(one) <= 6


def test_each_socket_gets_its_own_verdict(classroom, scenario):
    alice, bob = make_student("alice", classroom), make_student("bob", classroom)
    alices = make_session(alice, classroom, scenario)
    rights = [
        _Right(watchable_sessions, alices.pk, alice, alice.pk, session_key(alice), None),
        _Right(watchable_sessions, alices.pk, bob, bob.pk, session_key(bob), None),  # not his
        _Right(watchable_sessions, alices.pk, alice, alice.pk, "signed-out", None),
    ]
    assert check_rights(rights) == [True, False, False]


def test_a_course_grant_gone_from_the_server_ends_its_socket_alone(classroom, scenario):
    alice = make_student("alice", classroom)
    session = make_session(alice, classroom, scenario)
    grants = [
        tokens.launch_token_read(
            tokens.launch_token_issue(user=alice, session_id=session.pk, frame_origins=[])
        )
        for _ in range(2)
    ]
    rights = [_Right(watchable_sessions, session.pk, alice, alice.pk, None, g) for g in grants]
    assert check_rights(rights) == [True, True]
    cache.delete(tokens._key(grants[0].grant_id))
    assert check_rights(rights) == [False, True]


def test_a_test_that_cannot_answer_keeps_its_sockets_and_only_those(classroom, scenario):
    alice = make_student("alice", classroom)
    session = make_session(alice, classroom, scenario)

    def broken(pairs):
        raise ConnectionError("the database is restarting")

    rights = [
        _Right(broken, 1, alice, alice.pk, session_key(alice), None),
        _Right(watchable_sessions, session.pk, alice, alice.pk, "signed-out", None),
    ]
    assert check_rights(rights) == [None, False]
