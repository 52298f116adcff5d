"""The lab page's websocket with a launch-scoped token and no cookie, through the real ASGI
application (origin check, auth stack, routing) and the real channels-redis layer: the
token's session connects and gets live rows; no token, a bad one, another session's, or a
grant gone from the server is closed with 4403."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core import signing
from django.core.cache import cache

from lab_project.asgi import application
from labs.services import launch_token as tokens
from labs.services.lab import session_open
from tests.integration.test_consumer import (
    TIMEOUT,
    add_rows,
    receive,
    receive_events,
    run,
    world,  # noqa: F401 (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def token_for(session) -> str:
    return tokens.launch_token_issue(
        user=session.owner, session_id=session.pk, frame_origins=["https://lms.example"]
    )


def socket(session_id: int, token: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]  # no cookie
    path = f"/ws/sessions/{session_id}/?after=0" + (f"&launch={token}" if token else "")
    return WebsocketCommunicator(application, path, headers=headers)


def test_the_token_alone_connects_the_socket_and_live_rows_arrive(world):  # noqa: F811
    session = world["session"]
    comm = socket(session.pk, token_for(session))

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        assert (await receive(comm))["type"] == "state"
        (seq,) = await database_sync_to_async(add_rows)(session, 1)
        events = await receive_events(comm, lambda e: e["seq"] == seq)
        assert events[-1]["message"] == "row 0"
        await comm.disconnect()

    run(scenario)


@pytest.mark.parametrize("token", ["none", "tampered", "other_session", "forged_binding"])
def test_without_a_good_token_for_this_session_the_socket_is_closed(world, token):  # noqa: F811
    session = world["session"]
    good = token_for(session)
    if token == "none":
        value = None
    elif token == "tampered":
        value = good[:-2] + ("zz" if not good.endswith("zz") else "yy")
    elif token == "other_session":
        bob_room = world["bob"].memberships.get().classroom
        bobs = session_open(user=world["bob"], classroom=bob_room, scenario=session.scenario)
        value = token_for(bobs)
    else:  # validly signed for this session, but the grant on the server is Bob's
        payload = signing.loads(token_for(session), salt=tokens.SALT)
        value = signing.dumps({**payload, "u": world["bob"].pk}, salt=tokens.SALT)
    comm = socket(session.pk, value)

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected  # accepted so that the close code reaches the browser
        assert await comm.receive_output(TIMEOUT) == {"type": "websocket.close", "code": 4403}
        await comm.disconnect()

    run(scenario)


def test_a_grant_gone_from_the_server_closes_the_open_socket(world, settings):  # noqa: F811
    settings.LAB_WS_RECHECK_MS = 200
    session = world["session"]
    token = token_for(session)
    comm = socket(session.pk, token)

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        assert (await receive(comm))["type"] == "state"
        grant_id = signing.loads(token, salt=tokens.SALT)["g"]
        await database_sync_to_async(cache.delete)(f"lti-launch-grant:{grant_id}")
        while True:
            output = await comm.receive_output(TIMEOUT)
            if output["type"] == "websocket.close":
                assert output["code"] == 4403
                break
        await comm.disconnect()

    run(scenario)


def test_run_burst_over_a_token_socket_is_the_tokens_user_while_the_grant_holds(world):  # noqa: F811
    """A Run burst click sent over the socket has no Django session behind it: the grant
    names the user. It queues a burst; once the grant is gone, a click is refused."""
    session = world["session"]
    token = token_for(session)
    comm = socket(session.pk, token)

    async def click(ask: int) -> dict:
        await comm.send_json_to({"type": "run_burst", "id": ask, "size": "3", "concurrency": "1"})
        while True:
            message = await receive(comm)
            if message["type"] == "burst_reply":
                assert message["id"] == ask
                return message

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        assert (await receive(comm))["type"] == "state"
        first = await click(1)
        assert first["status"] == 200, first
        assert await database_sync_to_async(session.bursts.count)() == 1
        grant_id = signing.loads(token, salt=tokens.SALT)["g"]
        await database_sync_to_async(cache.delete)(f"lti-launch-grant:{grant_id}")
        second = await click(2)
        assert second["status"] == 403, second
        assert await database_sync_to_async(session.bursts.count)() == 1
        await comm.disconnect()

    run(scenario)
