"""Celery's Redis transport, with one client per channel instead of one per command.

kombu's Redis channel builds a new ``redis.Redis`` for most of what it sends, and redis-py
fills a table of about 170 response callbacks each time: a good part of queueing a burst
(figures in docs/scaling.md, "Overrides of libraries' private parts"). A client is a thin,
thread-safe front on its pool, so the channel keeps one per pool and builds a new one only when
kombu replaces the pool. ``lab_project.celery`` sets ``broker_transport`` to
:class:`Transport`; tests/test_broker.py and tests/test_overrides.py hold it to kombu's code.
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
