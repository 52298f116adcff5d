"""Celery's Redis transport, with one client per channel instead of one per command.

kombu's Redis channel builds a new ``redis.Redis`` for most of what it sends (a publish, a
queue length, an acknowledgement: ``Channel._create_client`` under ``conn_or_acquire``), on
the channel's one connection pool. Building one is not free: redis-py fills a
case-insensitive table of about 170 response callbacks each time, about a quarter of the CPU
of queueing a burst (a Run burst click in the web process: ``send_task`` 0.48 ms warm, of
which 0.13 ms building the client; benchmarks/run_burst_bench.py). A client is a thin,
thread-safe front on its pool, so the channel keeps one for its current pool and builds a new
one only when kombu replaces the pool (after a lost connection).

Used for every ``redis://``, ``rediss://`` and ``unix://`` broker (the only kinds the settings
accept): ``lab_project.celery`` sets ``broker_transport`` to :class:`Transport`.
tests/test_broker.py checks that a publish reuses the client and still reaches the queue.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["Channel", "Transport"]


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, keeping its synchronous client between commands."""

    _lab_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the worker's BRPOP loop keeps its own (kombu's ``client``)
            return super()._create_client(asynchronous=True)
        client = self._lab_client
        if client is None or client.connection_pool is not self.pool:
            client = self._lab_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
