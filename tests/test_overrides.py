"""Every override of a library's private parts is pinned to the library's code it replaces or
relies on: an upgrade that changes that code fails here, naming what to re-check.

docs/scaling.md ("Overrides of libraries' private parts") lists each override, why it is
kept, and the benchmark to run with ``--plain NAME`` beside it after an upgrade. After
re-checking, update the version and the fingerprints below (the failure prints the new ones).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Pin:
    override: str  # where the override is, in this project
    distribution: str  # the library, as requirements.txt names it
    version: str  # the version the fingerprints were taken from
    parts: dict[str, str]  # dotted name in the library -> sha256 of its source (16 hex)
    recheck: str  # what to re-check, and how to measure it again


PINS = [
    Pin(
        "labs/consumers/base.py DirectDispatch",
        "channels",
        "4.3.2",
        {
            "channels.consumer.AsyncConsumer.__call__": "e52238720872dbc3",
            "channels.consumer.AsyncConsumer.dispatch": "39f34e7d4fb0f655",
        },
        "DirectDispatch replaces __call__ (one inbox) and dispatch (no per-message hop to the "
        "sync thread for close_old_connections): tests/integration/test_consumer.py, then "
        "benchmarks/push_bench.py beside --plain dispatch",
    ),
    Pin(
        "lab_project/broker.py Channel._create_client",
        "kombu",
        "5.7.0",
        {"kombu.transport.redis.Channel._create_client": "dae92bc4075dafb9"},
        "the channel keeps the synchronous client _create_client builds: "
        "tests/test_broker.py, then benchmarks/run_burst_bench.py beside --plain kombu",
    ),
    Pin(
        "labs/worker/hub.py _send, _closed; labs/live/redis_batch.py",
        "redis",
        "8.1.0",
        {
            "redis.connection.AbstractConnection.connect": "3efda598d10dfdeb",
            "redis.connection.AbstractConnection.disconnect": "70a8b4f7cf62b587",
            "redis.connection.AbstractConnection.send_packed_command": "df64e60810061d0a",
            "redis.connection.AbstractConnection.read_response": "695c899843302e31",
            "redis.connection.AbstractConnection.can_read": "e439afce7d4f3eaa",
            "redis.client.Redis.execute_command": "a43353b5a0590660",
        },
        "the hub writes batches on a connection it keeps and reads _sock to see it closed: "
        "tests of labs/worker/hub.py, then benchmarks/storm_bench.py beside --plain hub-redis",
    ),
    Pin(
        "labs/live/channel_layer.py group_send_many, group_send_many_sync",
        "channels_redis",
        "4.3.0",
        {
            "channels_redis.utils._consistent_hash": "a67f87dec0b0b75d",
            "channels_redis.pubsub.RedisPubSubLoopLayer.group_send": "5d5f908ce40f335b",
        },
        "the batched sends name and place groups as group_send does and use the shards' "
        "_lock and _redis: tests/integration/test_channel_layer.py, then "
        "benchmarks/push_bench.py beside --plain layer",
    ),
    Pin(
        "labs/consumers/base.py SocketLimits, daphne_protocol, unsent_bytes",
        "daphne",
        "4.2.3",
        {"daphne.server.Server.create_application": "f1e300b4ecf636c8"},
        "daphne_protocol finds the protocol in send=partial(Server.handle_reply, protocol): "
        "tests/integration/test_daphne_sockets.py",
    ),
    Pin(
        "labs/consumers/base.py daphne_protocol (real_send)",
        "channels",
        "4.3.2",
        {"channels.sessions.InstanceSessionWrapper": "425465d6ccdaffcc"},
        "daphne_protocol follows the session middleware's real_send to daphne's send: "
        "tests/integration/test_daphne_sockets.py",
    ),
    Pin(
        "labs/consumers/base.py unsent_bytes",
        "Twisted",
        "26.10.0",
        {
            "twisted.internet.abstract.FileDescriptor.write": "3e46c97fc173bc7e",
            "twisted.internet.abstract.FileDescriptor.doWrite": "a986d7b1b1054e43",
        },
        "unsent_bytes reads dataBuffer, offset and _tempDataLen: "
        "tests/integration/test_daphne_sockets.py",
    ),
    Pin(
        "labs/live/channel_layer.py _Shard, _PubSub, _LoopLayer",
        "channels_redis",
        "4.3.0",
        {
            "channels_redis.pubsub.RedisSingleShardConnection.__init__": "9c8f408acb4c2d7b",
            "channels_redis.pubsub.RedisSingleShardConnection._ensure_redis": "ba228d3cee7116dc",
            "channels_redis.pubsub.RedisSingleShardConnection.subscribe": "173a8f40b17e4e28",
            "channels_redis.pubsub.RedisSingleShardConnection._do_receiving": "a822736dcb875e43",
            "channels_redis.pubsub.RedisSingleShardConnection._receive_message": "2f5f46af28e8ed76",
            "channels_redis.pubsub.RedisPubSubChannelLayer._get_layer": "1862b87a25ac72b2",
            "channels_redis.pubsub.RedisPubSubLoopLayer.__init__": "fd9d37e275298a58",
        },
        "the receive loop that waits for the first subscription instead of napping 100 ms, "
        "the re-subscription notice and the per-loop layer are copies of these: "
        "tests/integration/test_channel_layer.py",
    ),
    Pin(
        "labs/live/channel_layer.py _PubSub",
        "redis",
        "8.1.0",
        {"redis.asyncio.client.PubSub.on_connect": "4f91994e4caeecb7"},
        "_PubSub tells the shard after redis-py re-subscribes in on_connect: "
        "tests/integration/test_channel_layer.py",
    ),
]


def source_of(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    for name in parts[cut:]:
        found = getattr(found, name)
    return found


def fingerprint(dotted: str) -> str:
    return hashlib.sha256(inspect.getsource(source_of(dotted)).encode()).hexdigest()[:16]


def required_version(distribution: str) -> str:
    wanted = re.sub(r"[-_.]+", "-", distribution).lower()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, pinned = line.split("#", 1)[0].strip().partition("==")
        if re.sub(r"[-_.]+", "-", name).lower() == wanted:
            return pinned
    raise AssertionError(f"{distribution} is not pinned in requirements.txt")


@pytest.mark.parametrize("pin", PINS, ids=lambda pin: f"{pin.distribution}:{pin.override}")
def test_the_library_code_an_override_relies_on_is_unchanged(pin: Pin) -> None:
    installed = version(pin.distribution)
    assert required_version(pin.distribution) == installed == pin.version, (
        f"{pin.distribution} is {installed} (requirements.txt "
        f"{required_version(pin.distribution)}), pinned here against {pin.version}: "
        f"re-check {pin.override}: {pin.recheck}"
    )
    changed = {
        name: fingerprint(name) for name, known in pin.parts.items() if fingerprint(name) != known
    }
    assert not changed, (
        f"{pin.distribution} {installed} changed {sorted(changed)}, which {pin.override} "
        f"relies on: {pin.recheck}; then set the fingerprints to {changed}"
    )
