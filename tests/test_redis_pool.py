"""Django's cache shares one Redis connection pool per process (lab_project/redis_pool.py):
under ASGI each request runs in a context of its own, and each context builds its own cache
object, which used to mean a new pool and a new connection to Redis per request."""

from __future__ import annotations

import threading
import uuid

from django.core.cache import caches


def test_requests_in_fresh_threads_borrow_from_one_pool_and_one_connection():
    """Each thread starts with an empty context, as each ASGI request's thread does: it gets
    a cache object of its own, and still the pool (and the connection it opened) of the
    first."""
    key = f"pool-test-{uuid.uuid4().hex}"
    seen: list[tuple[object, object]] = []

    def request() -> None:
        cache = caches["default"]
        cache.add(key, 0, 60)
        cache.incr(key)
        seen.append((cache, cache._cache._get_connection_pool(True)))

    for _ in range(3):
        thread = threading.Thread(target=request)
        thread.start()
        thread.join()
    (first_cache, pool), *others = seen
    assert all(cache is not first_cache for cache, _ in others)  # a cache object per context
    assert all(other is pool for _, other in others)
    assert pool._created_connections == 1  # the threads took turns on one connection
    assert caches["default"].get(key) == 3
    caches["default"].delete(key)


def test_every_cache_operation_of_the_process_uses_one_redis_client():
    """Django's own client builds a ``redis.Redis`` per operation (about 0.1 ms each); the
    project's hands out one per pool, whichever thread or context asks."""
    clients: list[object] = []

    def request() -> None:
        cache = caches["default"]
        clients.append(cache._cache.get_client(write=True))
        clients.append(cache._cache.get_client(write=False))

    for _ in range(3):
        thread = threading.Thread(target=request)
        thread.start()
        thread.join()
    assert len({id(c) for c in clients}) == 1
    key = f"client-test-{uuid.uuid4().hex}"
    assert caches["default"].add(key, 1, 60)
    assert caches["default"].incr(key) == 2
    caches["default"].delete(key)
