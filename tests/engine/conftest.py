"""Fixtures for the engine tests (no database: nothing here touches Django)."""

from __future__ import annotations

import uuid

import pytest

from .helpers import REDIS_URL, Rig


@pytest.fixture
def rig():
    return Rig


@pytest.fixture
def redis_client():
    import redis
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def namespace(redis_client):
    ns = f"fltest:{uuid.uuid4().hex[:10]}"
    yield ns
    keys = list(redis_client.scan_iter(match=f"{ns}:*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=["memory", "redis"])
def store(request):
    """The same behaviour tests run on both stores."""
    from labs.engine import MemoryStore
    from labs.engine.redis import RedisStore

    if request.param == "memory":
        yield MemoryStore()
        return
    client = request.getfixturevalue("redis_client")
    ns = request.getfixturevalue("namespace")
    yield RedisStore(client, ns)
