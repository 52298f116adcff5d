"""The channel layer: channels-redis's pub/sub layer, plus one pipelined send for many groups.

Pub/sub, not the core layer: a ``group_send`` is one ``PUBLISH`` and a process receives
everything on one subscribed connection (the core layer's per-channel sorted sets cost three
round trips a message; figures in docs/live-page.md). Pub/sub keeps nothing for a consumer not
listening, which the consumers never rely on: they catch up from the journal, and after Redis
comes back every channel gets :data:`RECONNECTED`. ``group_send_many`` is the journal writer's
send, a batch in one pipeline (pinned in tests/test_overrides.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels_redis.pubsub import (
    RedisPubSubChannelLayer,
    RedisPubSubLoopLayer,
    RedisSingleShardConnection,
)
from channels_redis.utils import _consistent_hash, _wrap_close, decode_hosts
from redis.asyncio.client import PubSub

from lab_project.env import plain
from labs.live.redis_batch import send_batch

#: channels-redis's own ``group_send`` per message instead of the pipelined batches (LAB_PLAIN).
PLAIN = plain("layer")

logger = logging.getLogger(__name__)

#: What every channel of a process receives once the layer has subscribed again after losing
#: its connection to Redis: pushes published meanwhile reached nobody, so a consumer handles
#: it (``layer_reconnected``) by reading what it missed from the database.
RECONNECTED = {"type": "layer.reconnected"}


class _PubSub(PubSub):
    """redis-py's ``PubSub``, which tells its shard when it has re-subscribed.

    redis-py calls ``on_connect`` each time the subscribing connection connects again (not on
    the first connect) and re-subscribes every channel there; the shard is told after that,
    so a catch-up that follows misses nothing published from then on."""

    def __init__(self, shard: _Shard, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shard = shard

    async def on_connect(self, connection) -> None:
        await super().on_connect(connection)
        self._shard.resubscribed()


class _Shard(RedisSingleShardConnection):
    """One Redis connection's subscriptions, woken at once by the first subscription, telling
    the process's channels when they are renewed after a lost connection (``_PubSub``).

    channels-redis's receive loop sleeps 100 ms at a time while the process has no
    subscription, so the first pushes after a process's first (or, after everyone left, next)
    consumer joined waited up to 100 ms: the first burst a student ran on a quiet server
    arrived in one lump. Here the loop waits on an event that ``subscribe`` sets.
    """

    def __init__(self, host, channel_layer) -> None:
        super().__init__(host, channel_layer)
        self._subscribed = asyncio.Event()

    async def subscribe(self, channel):
        try:
            await super().subscribe(channel)
        except (redis.ConnectionError, redis.TimeoutError):
            # Redis closed the subscribing connection (a restart) while the process had no
            # subscription, so nothing read from it noticed: the first socket to open
            # afterwards failed its handshake (daphne's 500). A SUBSCRIBE is safe to send
            # again: once more on a new connection (redis-py's on_connect subscribes the
            # process's other channels again, if any, and the shard is told).
            pubsub = self._pubsub
            if pubsub is not None and pubsub.connection is not None:
                await pubsub.connection.disconnect()
            logger.info("channel layer: the subscribing connection was closed; reconnecting")
            await super().subscribe(channel)
        self._subscribed.set()

    def _ensure_redis(self):
        if self._redis is None:
            super()._ensure_redis()
            self._pubsub = _PubSub(self, self._redis.connection_pool)

    def resubscribed(self) -> None:
        """The connection to Redis is back: every channel of the process hears about it."""
        self.channel_layer.tell_every_channel(RECONNECTED)

    async def _do_receiving(self):
        while True:
            if self._pubsub is None or not self._pubsub.subscribed:
                self._subscribed.clear()
                await self._subscribed.wait()
            await self._receive_once()

    async def _receive_once(self) -> None:
        try:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            self._receive_message(message)
        except (TimeoutError, asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException:  # as channels-redis does: log, breathe, listen again
            logger.exception("Unexpected exception in receive task")
            await asyncio.sleep(1)


class _LoopLayer(RedisPubSubLoopLayer):
    def __init__(self, hosts=None, **kwargs) -> None:
        super().__init__(hosts, **kwargs)
        self._shards = [_Shard(host, self) for host in decode_hosts(hosts)]

    def tell_every_channel(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for every channel of this event loop (each consumer handles it
        in order with the pushes it receives)."""
        data = self.channel_layer.serialize(message)
        for queue in self.channels.values():
            queue.put_nowait(data)
        logger.info(
            "channel layer: subscribed to Redis again; %s sent to %d channel(s)",
            message["type"],
            len(self.channels),
        )


class LabChannelLayer(RedisPubSubChannelLayer):
    """``RedisPubSubChannelLayer`` with :meth:`group_send_many` (and a synchronous twin) and a
    receive loop that does not nap (see ``_Shard``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._prefix = kwargs.get("prefix", "asgi")
        self._hosts = decode_hosts(kwargs.get("hosts"))
        self._sync_clients: dict[int, redis.Redis] = {}
        self._sync_clients_lock = threading.Lock()

    def _get_layer(self):
        loop = asyncio.get_running_loop()
        try:
            return self._layers[loop]
        except KeyError:
            layer = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
            return layer

    def _by_host(
        self, messages: Iterable[tuple[str, dict[str, Any]]]
    ) -> dict[int, list[tuple[str, bytes]]]:
        """(Redis channel, serialized message) of each (group, message), in order, by the
        index of the host that carries the group (channels-redis's own naming and hashing)."""
        per_host: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        for group, message in messages:
            name = f"{self._prefix}__group__{group}"
            per_host[_consistent_hash(name, len(self._hosts))].append(
                (name, self.serialize(message))
            )
        return per_host

    async def group_send_many(self, messages: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """``group_send`` each (group, message), in order, one pipeline per Redis host."""
        if PLAIN:
            for group, message in messages:
                await self.group_send(group, message)
            return
        layer = self._get_layer()  # the per-event-loop layer that owns the connections
        for index, items in self._by_host(messages).items():
            shard = layer._shards[index]
            async with shard._lock:
                shard._ensure_redis()
                pipe = shard._redis.pipeline(transaction=False)
                for name, data in items:
                    pipe.publish(name, data)
                await pipe.execute()

    def group_send_many_sync(self, messages: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """:meth:`group_send_many` for synchronous code (views, services, worker threads):
        one batch per host on a pooled connection (``send_batch``), no event loop.

        ``async_to_sync(group_send)`` from a request thread waited for daphne's event loop to
        run the send (behind every push it was forwarding), and from a thread with no loop
        at all (a Celery thread) it built an event loop and a Redis connection per call.
        """
        if PLAIN:
            for group, message in messages:
                async_to_sync(self.group_send)(group, message)
            return
        for index, items in self._by_host(messages).items():
            pool = self._sync_client(index).connection_pool
            conn = pool.get_connection()
            try:
                replies = send_batch(conn, [("PUBLISH", name, data) for name, data in items])
            finally:
                pool.release(conn)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply

    def connect_sync(self) -> None:
        """Open the pooled connection :meth:`group_send_many_sync` uses for each host now
        (a ``PING`` each), so a process's first send does not pay the connect (the journal
        writer process does it when it starts)."""
        for index in range(len(self._hosts)):
            self._sync_client(index).ping()

    def _sync_client(self, index: int) -> redis.Redis:
        client = self._sync_clients.get(index)
        if client is None:
            with self._sync_clients_lock:
                client = self._sync_clients.get(index)
                if client is None:
                    host = dict(self._hosts[index])
                    address = host.pop("address", None)
                    client = (
                        redis.Redis.from_url(address, **host) if address else redis.Redis(**host)
                    )
                    self._sync_clients[index] = client
        return client
