"""redis-py parses Redis replies with hiredis (C) rather than its pure-Python parser.

Every engine decision, dependency step and channel-layer message is a Redis reply; hiredis
parses them with less of the interpreter's time (pinned in requirements.txt).
"""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from django.conf import settings
from redis._parsers import _AsyncHiredisParser, _HiredisParser
from redis.utils import HIREDIS_AVAILABLE

from labs.live import runtime

pytestmark = [pytest.mark.integration]


def test_redis_py_finds_hiredis():
    assert HIREDIS_AVAILABLE, "hiredis is not importable: pip install -r requirements.txt"


def test_the_engine_client_parses_replies_with_hiredis():
    client = runtime.engine_redis()
    assert client.ping()
    connection = client.connection_pool.get_connection()
    try:
        assert isinstance(connection._parser, _HiredisParser), type(connection._parser)
    finally:
        client.connection_pool.release(connection)


def test_asyncio_clients_parse_replies_with_hiredis():
    """The channel layer's clients (redis.asyncio, in daphne and the journal writer)."""

    async def parser_of_a_live_connection():
        client = redis.asyncio.Redis.from_url(settings.CHANNEL_LAYER_REDIS_URL)
        try:
            assert await client.ping()
            connection = await client.connection_pool.get_connection()
            try:
                return type(connection._parser)
            finally:
                await client.connection_pool.release(connection)
        finally:
            await client.aclose()

    assert asyncio.run(parser_of_a_live_connection()) is _AsyncHiredisParser
