"""The lab's channel layer (labs/live/channel_layer.py) against the real Redis of the settings:
pipelined sends arrive whole and in order, and the receive loop does not nap."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from labs.journal import broadcast
from labs.live.channel_layer import LabChannelLayer

pytestmark = [pytest.mark.integration]

TIMEOUT = 5


def test_the_settings_use_the_lab_layer():
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "labs.live.channel_layer.LabChannelLayer"
    assert isinstance(get_channel_layer(), LabChannelLayer)


def test_a_pipelined_batch_reaches_each_group_in_order_and_nothing_else():
    async def scenario():
        layer = get_channel_layer()
        first, second = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("fl-test-a", first)
        await layer.group_add("fl-test-b", second)
        await layer.group_add("fl-test-b", first)
        await broadcast.asend_all(
            [
                ("fl-test-a", {"type": "t.m", "n": 1}),
                ("fl-test-nobody", {"type": "t.m", "n": 2}),
                ("fl-test-b", {"type": "t.m", "n": 3}),
                ("fl-test-a", {"type": "t.m", "n": 4}),
            ]
        )
        got_first = [(await asyncio.wait_for(layer.receive(first), TIMEOUT))["n"] for _ in "abc"]
        got_second = [(await asyncio.wait_for(layer.receive(second), TIMEOUT))["n"]]
        # Nothing more is on its way to either channel (a ping behind the batch comes next).
        await layer.send(first, {"type": "t.m", "n": "end"})
        assert (await asyncio.wait_for(layer.receive(first), TIMEOUT))["n"] == "end"
        await layer.flush()
        return got_first, got_second

    got_first, got_second = async_to_sync(scenario)()
    assert got_first == [1, 3, 4]
    assert got_second == [3]


def test_the_receive_loop_waits_for_a_subscription_instead_of_napping(monkeypatch):
    """channels-redis's own loop sleeps 0.1 s at a time while nothing is subscribed, so the
    first push to a process whose pages had all gone waited up to 100 ms."""
    naps: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay, *args, **kwargs):
        naps.append(delay)
        return await real_sleep(delay, *args, **kwargs)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("fl-test-c", channel)
        await layer.group_send("fl-test-c", {"type": "t.m", "n": 1})
        assert (await asyncio.wait_for(layer.receive(channel), TIMEOUT))["n"] == 1
        # Everyone leaves: the loop has nothing to listen to for a while, then a page comes.
        await layer.group_discard("fl-test-c", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        await real_sleep(0.3)
        receiving.cancel()  # drops the channel's own subscription, as a closing consumer does
        with pytest.raises(asyncio.CancelledError):
            await receiving
        await real_sleep(0.3)
        again = await layer.new_channel()
        await layer.group_add("fl-test-c", again)
        await layer.group_send("fl-test-c", {"type": "t.m", "n": 2})
        message = await asyncio.wait_for(layer.receive(again), TIMEOUT)
        await layer.flush()
        return message

    assert async_to_sync(scenario)()["n"] == 2
    assert 0.1 not in naps, naps


def test_a_send_from_synchronous_code_reaches_subscribers_in_order_without_an_event_loop():
    """Views and worker threads publish with a plain Redis client (no async_to_sync)."""

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("fl-test-sync", channel)
        await asyncio.to_thread(
            broadcast.send_all,
            [("fl-test-sync", {"type": "t.m", "n": 1}), ("fl-test-sync", {"type": "t.m", "n": 2})],
        )
        got = [(await asyncio.wait_for(layer.receive(channel), TIMEOUT))["n"] for _ in "ab"]
        await layer.flush()
        return got

    loops_made: list[None] = []
    original = asyncio.new_event_loop

    def counting_new_event_loop():
        loops_made.append(None)
        return original()

    asyncio.new_event_loop = counting_new_event_loop
    try:
        got = async_to_sync(scenario)()
    finally:
        asyncio.new_event_loop = original
    assert got == [1, 2]
    assert loops_made == []  # the sending thread never built a loop of its own


def test_connect_sync_opens_the_pooled_connection_the_synchronous_send_then_uses():
    """The journal writer process connects when it starts, so its first push pays no connect."""
    layer = LabChannelLayer(hosts=[settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]])
    layer.connect_sync()
    pool = layer._sync_client(0).connection_pool
    assert pool._created_connections == 1
    layer.group_send_many_sync([("fl-test-connect", {"type": "t.m"})])
    assert pool._created_connections == 1  # the send took the connection opened before
