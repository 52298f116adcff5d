"""One Redis connection pool and one client per process for Django's cache, not one per request.

Under ASGI each request has a context of its own, and Django keeps its cache objects per
context, so every request would build a new pool and TCP connection, and Django's client a
new ``redis.Redis`` per operation. :class:`SharedConnectionPool` (``pool_class``) hands out
one pool per URL and options; :class:`SharedRedisCache` (``BACKEND``) one ``redis.Redis`` per
pool, which is safe to share between threads. What it saved: CHANGELOG.md.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

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


#: The client of each pool (pools compare by identity; every one here is the process's own).
_clients: dict[redis.ConnectionPool, redis.Redis] = {}


class SharedClientCacheClient(RedisCacheClient):
    """Django's Redis cache client, with one ``redis.Redis`` per connection pool for the whole
    process instead of a new one per operation."""

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        pool = self._get_connection_pool(write)
        client = _clients.get(pool)
        if client is None:
            with _lock:
                client = _clients.get(pool)
                if client is None:
                    client = _clients[pool] = self._client(connection_pool=pool)
        return client


class SharedRedisCache(RedisCache):
    """Django's ``RedisCache`` on :class:`SharedClientCacheClient`."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientCacheClient
