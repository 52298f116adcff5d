"""One Redis connection pool per process for Django's cache, not one per request.

Django keeps its cache objects in a context-local store, and under ASGI each request has a
context of its own: every request built a new ``RedisCache`` client, a new connection pool
and so a new TCP connection to Redis (with redis-py's handshake) just for Run burst's rate
limit counter. ``CACHES["default"]["OPTIONS"]["pool_class"]`` names :class:`SharedConnectionPool`,
whose ``from_url`` hands out one pool per URL and options for the whole process: a request
then borrows an open connection (CHANGELOG.md has what it saved in push_bench).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis

_pools: dict[tuple[Any, ...], redis.ConnectionPool] = {}
_lock = threading.Lock()


class SharedConnectionPool(redis.ConnectionPool):
    """A ``redis.ConnectionPool`` whose ``from_url`` returns the process's pool for that URL
    and those options (a forked child builds its own: redis-py's pool is not fork-safe to
    share, so the key carries the process id)."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> redis.ConnectionPool:
        key = (os.getpid(), url, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        pool = _pools.get(key)
        if pool is None:
            with _lock:
                pool = _pools.get(key)
                if pool is None:
                    pool = _pools[key] = super().from_url(url, **kwargs)
        return pool
