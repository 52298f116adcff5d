"""Run burst over the lab page's websocket, through the real ASGI application (origin check,
session-cookie auth) and the real channels-redis layer: the same checks and answers as the
form's POST (tests/labs/test_burst_view_limits.py has the POST's), for the owner only, with
the user read again from the socket's Django session at every click."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from lab_project.asgi import application
from labs import clicks
from labs.models import Burst, JournalEvent
from labs.selectors.access import owned_session_keys
from labs.services import lab
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.test_consumer import TIMEOUT, cookie_for, receive, socket

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    return {
        "session": lab.session_open(user=alice, classroom=room, scenario=scenario),
        "alice": alice,
        "teacher": make_instructor("teacher", room),
    }


async def connected(comm: WebsocketCommunicator) -> None:
    ok, _ = await comm.connect(TIMEOUT)
    assert ok
    assert (await receive(comm))["type"] == "state"


async def click(comm: WebsocketCommunicator, ask: int, size="3", concurrency="1") -> dict:
    """Send a click and return its reply (journal pushes arriving meanwhile are skipped)."""
    await comm.send_json_to(
        {"type": "run_burst", "id": ask, "size": size, "concurrency": concurrency}
    )
    while True:
        message = await receive(comm)
        if message["type"] == "burst_reply":
            assert message["id"] == ask
            return message


def clicks_over(comm: WebsocketCommunicator, *clicks: dict[str, str]) -> list[dict]:
    """Connect, send each click in turn (ids 1, 2, ...), disconnect: the replies in order."""

    async def scenario():
        await connected(comm)
        replies = [await click(comm, n, **numbers) for n, numbers in enumerate(clicks, 1)]
        await comm.disconnect()
        return replies

    return async_to_sync(scenario)()


def bursts_of(session) -> list[tuple[int, int]]:
    return list(Burst.objects.filter(session=session).values_list("number", "size"))


def test_the_owners_click_queues_a_burst_and_gets_the_message_line_back(world):
    session = world["session"]
    first, again = clicks_over(socket(session.pk, world["alice"]), {}, {})
    assert first["status"] == 200
    assert first["html"] == (
        '<p id="burst-message" class="form-message" role="status">Burst 1 queued: 3 calls.</p>'
    )
    assert bursts_of(session) == [(1, 3)]
    queued = JournalEvent.objects.get(session=session, kind="burst_queued")
    assert queued.actor_id == world["alice"].pk and queued.data["size"] == 3
    # The first is still queued (no worker runs here): the second is refused, as a POST is.
    assert again["status"] == 409
    assert "is-error" in again["html"] and "A burst is already running" in again["html"]
    assert bursts_of(session) == [(1, 3)]


def test_a_watcher_is_refused_and_nothing_is_queued(world):
    session = world["session"]
    # the class's instructor may watch it
    (reply,) = clicks_over(socket(session.pk, world["teacher"]), {})
    assert reply["status"] == 403
    assert "you can only watch it" in reply["html"]
    assert bursts_of(session) == []


def test_a_click_after_signing_out_is_refused(world):
    """The socket outlives the sign-out (another tab): its next click finds no user in the
    Django session any more."""
    session = world["session"]
    client = Client()
    client.force_login(world["alice"])
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    comm = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"origin", b"http://localhost"), (b"host", b"localhost"),
                 (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())],
    )  # fmt: skip

    async def scenario():
        await connected(comm)
        await database_sync_to_async(Session.objects.filter(session_key=cookie).delete)()
        reply = await click(comm, 1)
        await comm.disconnect()
        return reply

    reply = async_to_sync(scenario)()
    assert reply["status"] == 403 and "signed out" in reply["html"]
    assert bursts_of(session) == []


def test_numbers_out_of_range_send_the_page_to_the_form(world):
    """The form shows a field's problem beside it: the reply tells the page to post the form
    (which answers 400 with the ranges), and nothing is queued or counted."""
    session = world["session"]
    replies = clicks_over(
        socket(session.pk, world["alice"]),
        {"size": "500"}, {"size": "x"}, {"concurrency": "0"}, {"size": "9" * 500},
    )  # fmt: skip
    assert [r.get("fallback") for r in replies] == [True] * 4
    assert all(r["status"] == 400 and "html" not in r for r in replies)
    assert bursts_of(session) == []


def test_the_socket_and_the_form_count_against_one_limit(world, monkeypatch):
    monkeypatch.setattr(clicks, "RUN_BURST_LIMIT_PER_MINUTE", 1)
    session = world["session"]
    first, second = clicks_over(socket(session.pk, world["alice"]), {}, {})
    assert first["status"] == 200
    assert second["status"] == 429 and second["retry_after"] >= 1
    assert "at most 1 a minute" in second["html"]
    client = Client()
    client.force_login(world["alice"])
    posted = client.post(f"/sessions/{session.pk}/bursts/", {"size": "2", "concurrency": "1"})
    assert posted.status_code == 429
    assert bursts_of(session) == [(1, 3)]


def test_a_click_without_an_id_is_ignored_and_the_socket_stays(world):
    session = world["session"]
    comm = socket(session.pk, world["alice"])

    async def scenario():
        await connected(comm)
        await comm.send_json_to({"type": "run_burst", "size": "3", "concurrency": "1"})
        await comm.send_json_to({"type": "ping"})
        pong = await receive(comm)
        await comm.disconnect()
        return pong

    assert async_to_sync(scenario)()["type"] == "pong"
    assert bursts_of(session) == []


def test_the_ownership_read_has_the_keys_only_and_only_for_the_owner(world):
    session, alice, teacher = world["session"], world["alice"], world["teacher"]
    owned = owned_session_keys(alice, session.pk)
    assert (owned.pk, owned.owner_id, owned.classroom_id) == (
        session.pk, alice.pk, session.classroom_id,
    )  # fmt: skip
    assert {"policy", "dependency", "scenario_id"} <= owned.get_deferred_fields()
    assert owned_session_keys(teacher, session.pk) is None  # may watch, not own
    assert owned_session_keys(alice, session.pk + 1000) is None
    assert owned_session_keys(AnonymousUser(), session.pk) is None


def test_a_click_reads_the_session_row_once_and_no_deferred_field(world):
    """A click on the keys-only session (above) must not read one of its deferred fields:
    each would be one more query per click, silently."""
    session = world["session"]
    with CaptureQueriesContext(connection) as captured:
        reply = clicks.socket_run_burst(
            cookie_for(world["alice"]), session.pk, {"size": 3, "concurrency": 1}
        )
    assert reply["status"] == 200, reply
    selects = [
        q["sql"] for q in captured.captured_queries
        if q["sql"].startswith("SELECT") and "labs_labsession" in q["sql"]
    ]  # fmt: skip
    assert len(selects) == 1 and selects[0].startswith("SELECT id, owner_id, classroom_id ")
    assert bursts_of(session) == [(1, 3)]
