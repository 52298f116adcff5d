"""Consumers catch up when the channel layer's connection to Redis comes back.

Redis pub/sub delivers nothing to a process whose connection is down, and after a Redis restart
the first pushes can be published before the process has subscribed again: nobody receives
them, and no later push may come to reveal the gap. These tests restart a real redis-server
(one of their own, on a port of their own, so the rest of the test run's Redis is untouched)
under a connected consumer, commit rows while nobody is subscribed yet, and wait for the rows
to reach the page with no further push.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from lab_project.asgi import application
from labs.journal import broadcast
from labs.journal import store as journal
from labs.services import lab
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.conftest import OwnRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 5
#: How long a page may wait for the rows after the restart (the promise is about a second;
#: the margin covers a loaded machine).
CATCH_UP_TIMEOUT = 20



class RedisServer(OwnRedis):
    """The channel layer's own redis-server."""

    def subscribers(self, group: str) -> int:
        (_, count), = redis.Redis.from_url(self.url).pubsub_numsub(f"asgi__group__{group}")
        return count


@pytest.fixture
def layer_redis(settings, tmp_path):
    """The channel layer on a redis-server of this test's own."""
    server = RedisServer(tmp_path)
    server.start()
    settings.CHANNEL_LAYERS = {
        "default": {
            **settings.CHANNEL_LAYERS["default"],
            "CONFIG": {"hosts": [{"address": server.url}]},
        }
    }
    yield server
    server.kill()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def cookie_header(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    value = client.cookies[settings.SESSION_COOKIE_NAME].value
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={value}".encode())


def communicator(path: str, user) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), cookie_header(user)]
    return WebsocketCommunicator(application, path, headers=headers)


def commit_rows_blocking(session, count: int) -> list[int]:
    """Journal ``count`` rows (rows, then their push, as a service does) from another thread,
    while the caller's event loop is held: the consumer's receive loop cannot run meanwhile,
    so the pushes go out before it could subscribe again."""
    seqs: list[int] = []

    def work() -> None:
        entries = [
            journal.Entry(session_id=session.pk, classroom_id=session.classroom_id,
                          kind="policy_set", message=f"after the restart {i}")
            for i in range(count)
        ]  # fmt: skip
        seqs.extend(row.seq for row in journal.record(entries))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert len(seqs) == count
    return seqs


@pytest.fixture
def world(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    session = lab.session_open(user=alice, classroom=room, scenario=scenario)
    return {"session": session, "alice": alice, "teacher": make_instructor("teacher", room)}


def test_the_lab_page_gets_rows_pushed_before_the_layer_resubscribed(world, layer_redis):
    session = world["session"]
    comm = communicator(f"/ws/sessions/{session.pk}/", world["alice"])

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        state = json.loads(await comm.receive_from(TIMEOUT))
        assert state["type"] == "state"
        group = broadcast.session_group(session.pk)
        assert layer_redis.subscribers(group) == 1
        # Everything below runs without yielding to the event loop until the rows are in.
        layer_redis.restart()
        assert layer_redis.subscribers(group) == 0  # nobody hears the pushes that follow
        seqs = commit_rows_blocking(session, 3)
        received: list[int] = []
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while set(seqs) - set(received):
            message = json.loads(await comm.receive_from(max(0.1, deadline - time.monotonic())))
            if message["type"] == "events":
                received.extend(e["seq"] for e in message["events"])
        await comm.disconnect()
        return seqs, received

    seqs, received = async_to_sync(scenario)()
    assert received == seqs  # each row once, in order


def test_the_dashboard_gets_a_fresh_snapshot_when_the_layer_reconnects(world, layer_redis):
    session, room = world["session"], world["session"].classroom
    comm = communicator(f"/ws/classes/{room.pk}/", world["teacher"])

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        first = await comm.receive_json_from(TIMEOUT)
        assert first["type"] == "snapshot"
        layer_redis.restart()
        assert layer_redis.subscribers(broadcast.class_group(room.pk)) == 0
        seqs = commit_rows_blocking(session, 2)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while True:
            message = await comm.receive_json_from(max(0.1, deadline - time.monotonic()))
            if message["type"] == "snapshot":
                row = next(r for r in message["rows"] if r["session"] == session.pk)
                if row["last_seq"] == seqs[-1]:
                    break
        await comm.disconnect()

    async_to_sync(scenario)()


def test_every_channel_of_the_process_hears_that_the_layer_subscribed_again(layer_redis):
    """The layer itself: after the restart each channel receives ``layer.reconnected``, once
    the subscriptions are renewed (a publish from then on reaches the group again)."""
    import asyncio

    from channels.layers import get_channel_layer

    from labs.live.channel_layer import RECONNECTED

    async def scenario():
        layer = get_channel_layer()
        first, second = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("fl-reconnect", first)
        layer_redis.restart()
        got = [
            await asyncio.wait_for(layer.receive(first), CATCH_UP_TIMEOUT),
            await asyncio.wait_for(layer.receive(second), CATCH_UP_TIMEOUT),
        ]
        assert layer_redis.subscribers("fl-reconnect") == 1
        await layer.group_send("fl-reconnect", {"type": "after"})
        got.append(await asyncio.wait_for(layer.receive(first), TIMEOUT))
        await layer.flush()
        return got

    assert async_to_sync(scenario)() == [RECONNECTED, RECONNECTED, {"type": "after"}]
