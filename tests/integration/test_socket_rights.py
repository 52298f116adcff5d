"""Open websockets keep the right that let them in, or close (labs.consumers.base.RightCheck),
through a real daphne and real websocket clients.

- A logout (the Django session deleted) closes the user's lab page, storm panel and
  dashboard sockets with 4403 within a few seconds, and nothing is sent on them after.
- An instructor who stops teaching the class loses the storm panel (its student table names
  students), the dashboard and the lab page of the class's student; the student's own lab
  page stays open and answers.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from labs.models import Membership
from labs.services import lab
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.conftest import DaphneProcess, subprocess_env
from tests.integration.private_stack import http_post

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: What the page may wait for the close (the re-check runs every LAB_WS_RECHECK_MS, 1 s here).
CLOSE_WITHIN_S = 15.0


@pytest.fixture
def daphne(transactional_db, tmp_path):
    env = {**subprocess_env(), "LAB_WS_RECHECK_MS": "1000"}
    server = DaphneProcess(tmp_path / "daphne.log", env=env)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Rights", join_code="RIGHTS01")
    room.scenarios.add(scenario)
    student = make_student("stella", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    return {"room": room, "session": session, "student": student,
            "teacher": make_instructor("tara", room)}  # fmt: skip


def login_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


class Watched:
    """A websocket client reading on a thread of its own: every message, when it came, and
    how the socket closed."""

    def __init__(self, daphne: DaphneProcess, path: str, cookie: str) -> None:
        self._connection = connect(
            f"ws://127.0.0.1:{daphne.port}{path}",
            origin=daphne.base,
            additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
            max_size=None,
            open_timeout=20,
        )
        self.ws = self._connection.__enter__()  # as ``with connect(...) as ws`` does
        self.messages: list[tuple[float, str]] = []
        self.closed_at: float | None = None
        self.code: int | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                self.messages.append((time.monotonic(), self.ws.recv()))
        except ConnectionClosed as closed:
            self.closed_at = time.monotonic()
            self.code = closed.rcvd.code if closed.rcvd is not None else 1006

    def first_message(self, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while not self.messages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.messages, "no first message"
        return json.loads(self.messages[0][1])

    def wait_closed(self, timeout: float = CLOSE_WITHIN_S) -> int | None:
        self.thread.join(timeout)
        return self.code

    def sent_after(self, moment: float) -> list[str]:
        return [text for at, text in self.messages if at > moment]

    def close(self) -> None:
        self._connection.__exit__(None, None, None)
        self.thread.join(10)


def open_all(daphne, paths: dict[str, str], cookie: str) -> dict[str, Watched]:
    sockets = {name: Watched(daphne, path, cookie) for name, path in paths.items()}
    for name, sock in sockets.items():
        assert sock.first_message(), name
    return sockets


def test_a_logout_closes_every_socket_of_that_login_with_4403(daphne, world):
    room, session = world["room"], world["session"]
    teacher_cookie = login_cookie(world["teacher"])
    sockets = open_all(daphne, {
        "storm": f"/ws/classes/{room.pk}/storm/",
        "dashboard": f"/ws/classes/{room.pk}/",
        "lab": f"/ws/sessions/{session.pk}/",
    }, teacher_cookie)  # fmt: skip
    student = Watched(daphne, f"/ws/sessions/{session.pk}/", login_cookie(world["student"]))
    assert student.first_message()["type"] == "state"
    time.sleep(2.5)  # a few re-checks pass with the right intact: nothing closes
    assert all(s.closed_at is None for s in sockets.values())
    assert sockets["storm"].sent_after(0), "the storm panel streams"

    status, _ = http_post(daphne.url, "/accounts/logout/", teacher_cookie, {})
    assert status in (200, 302)
    logged_out = time.monotonic()
    try:
        for name, sock in sockets.items():
            assert sock.wait_closed() == 4403, name
            assert sock.closed_at - logged_out < CLOSE_WITHIN_S
        time.sleep(1.5)  # nothing arrives once closed (the socket is gone: none can)
        # Between the revocation and the close frame nothing was sent: the last message
        # came no later than one tick after the logout was seen.
        storm = sockets["storm"]
        assert all(at <= storm.closed_at for at, _ in storm.messages)
        # The student's own login is another: her page stays open and answers.
        assert student.closed_at is None
        student.ws.send('{"type": "ping"}')
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            '"pong"' in text for _, text in student.messages
        ):
            time.sleep(0.05)
        assert any('"pong"' in text for _, text in student.messages)
    finally:
        student.close()


def test_an_instructor_who_stops_teaching_the_class_loses_its_sockets(daphne, world):
    room, session = world["room"], world["session"]
    sockets = open_all(daphne, {
        "storm": f"/ws/classes/{room.pk}/storm/",
        "dashboard": f"/ws/classes/{room.pk}/",
        "lab": f"/ws/sessions/{session.pk}/",
    }, login_cookie(world["teacher"]))  # fmt: skip
    student = Watched(daphne, f"/ws/sessions/{session.pk}/", login_cookie(world["student"]))
    assert student.first_message()["type"] == "state"

    Membership.objects.filter(user=world["teacher"], classroom=room).delete()
    removed = time.monotonic()
    try:
        for name, sock in sockets.items():
            assert sock.wait_closed() == 4403, name
            assert sock.closed_at - removed < CLOSE_WITHIN_S
        # The storm panel sent its student table (usernames) no more once it closed.
        storm_after = [
            text for text in sockets["storm"].sent_after(sockets["storm"].closed_at)
        ]
        assert storm_after == []
        time.sleep(2.5)
        assert student.closed_at is None, "the student's own page must stay open"
    finally:
        student.close()


def test_a_socket_of_a_session_that_expired_closes(daphne, world):
    """Expiry is a logout the server decides: the session row is still there, but past its
    expiry date."""
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    cookie = login_cookie(world["student"])
    sock = Watched(daphne, f"/ws/sessions/{world['session'].pk}/", cookie)
    assert sock.first_message()["type"] == "state"
    Session.objects.filter(session_key=cookie).update(expire_date=timezone.now())
    assert sock.wait_closed() == 4403


def test_a_student_removed_from_the_class_loses_the_live_page(daphne, world):
    room, session = world["room"], world["session"]
    sock = Watched(daphne, f"/ws/sessions/{session.pk}/", login_cookie(world["student"]))
    assert sock.first_message()["type"] == "state"
    teacher = Watched(daphne, f"/ws/sessions/{session.pk}/", login_cookie(world["teacher"]))
    assert teacher.first_message()["type"] == "state"
    Membership.objects.filter(user=world["student"], classroom=room).delete()
    try:
        assert sock.wait_closed() == 4403
        time.sleep(2.5)
        assert teacher.closed_at is None, "the class's instructor still watches the session"
    finally:
        teacher.close()
    # Opened again, it is refused at once.
    again = Watched(daphne, f"/ws/sessions/{session.pk}/", login_cookie(world["student"]))
    assert again.wait_closed(10) == 4403
    assert again.messages == []
