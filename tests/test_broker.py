"""The Celery transport (lab_project/broker.py): kombu's Redis transport keeping one client per
channel. Against the test Redis's broker database."""

from __future__ import annotations

import uuid

import redis
from django.conf import settings
from kombu import Connection

from lab_project.broker import Channel, Transport
from lab_project.celery import app


def test_the_app_publishes_through_the_labs_transport():
    with app.connection_for_write() as connection:
        assert connection.transport_cls == "lab_project.broker:Transport"
        assert isinstance(connection.default_channel, Channel)


def test_a_channel_keeps_one_client_for_its_commands_and_every_message_arrives():
    queue = f"test-broker-{uuid.uuid4().hex[:8]}"
    with Connection(settings.CELERY_BROKER_URL, transport=Transport) as connection:
        channel = connection.default_channel
        producer = connection.Producer(serializer="json")
        clients = set()
        for n in range(3):
            producer.publish(
                {"n": n}, routing_key=queue, declare=[connection.SimpleQueue(queue).queue]
            )
            clients.add(id(channel._create_client()))
        assert len(clients) == 1
        with connection.SimpleQueue(queue) as simple:
            got = [simple.get(timeout=5) for _ in range(3)]
            for message in got:
                message.ack()
        assert [m.payload["n"] for m in got] == [0, 1, 2]
        assert redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(queue) == 0


def test_a_channel_builds_a_new_client_when_kombu_replaces_its_pool():
    with Connection(settings.CELERY_BROKER_URL, transport=Transport) as connection:
        channel = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        channel._pool = None  # what kombu does after a lost connection
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool
        assert second.ping()
