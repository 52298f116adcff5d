"""Run burst while Redis is down, through the real view, the real service and a real Redis
that the test stops and starts again (a redis-server of its own on a free port, so stopping it
disturbs nothing else).

A burst that could not be queued must not stay active (it would block the session until the
queue timeout): it is marked FAILED with a journal row saying why, and the request answers 503
with the form and a "reconnecting" sentence. Once Redis is back, the next click queues a burst.
"""

from __future__ import annotations

import pytest
import redis
from django.test import Client
from django.urls import reverse
from kombu import pools as kombu_pools

from lab_project.celery import app
from labs.models import Burst, JournalEvent, LabSession
from labs.services import lab
from tests.conftest import make_classroom, make_scenario, make_student
from tests.integration.conftest import OwnRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HTMX = {"HTTP_HX_REQUEST": "true"}


class PrivateRedis(OwnRedis):
    """The broker's own redis-server: ``stop`` kills it, ``start`` brings it back."""

    def stop(self) -> None:
        self.kill()

    def queued(self) -> int:
        return redis.Redis.from_url(self.url).llen("celery")


def use_broker(url: str) -> None:
    """Point the project's Celery app at ``url`` and drop its pooled connections and producers
    (the reset Celery itself does in a forked child), so the next send connects there.

    ``kombu.pools.reset`` rather than closing the app's pool: kombu keeps pools in a process-wide
    registry, and a closed pool left in it is handed to every later send ("Acquire on closed
    pool" in the tests that follow)."""
    kombu_pools.reset()
    app.conf.broker_url = url
    app._after_fork()


@pytest.fixture
def broker(tmp_path):
    """The Celery app's broker moved to a private Redis for the test (and back after)."""
    server = PrivateRedis(tmp_path)
    server.start()
    previous = app.conf.broker_url
    use_broker(server.url)
    yield server
    use_broker(previous)
    server.stop()


@pytest.fixture
def session(db) -> LabSession:
    scenario = make_scenario("outage")
    room = make_classroom("Outage", join_code="OUTAGE01")
    room.scenarios.add(scenario)
    student = make_student("olga", room)
    return lab.session_open(user=student, classroom=room, scenario=scenario)


@pytest.fixture
def owner(session) -> Client:
    client = Client()
    client.force_login(session.owner)
    return client


def run_burst(client: Client, session: LabSession, htmx: bool = True, size: int = 3):
    url = reverse("labs:session_burst", args=[session.pk])
    return client.post(url, {"size": str(size)}, **(HTMX if htmx else {}))


def test_run_burst_while_the_broker_is_down_fails_it_at_once_and_answers_503(
    broker, session, owner
):
    broker.stop()
    response = run_burst(owner, session)
    assert response.status_code == 503
    html = response.content.decode()
    assert 'id="burst-form"' in html  # the form, ready to click again
    assert "reconnecting" in html
    assert response["Retry-After"]
    # Nothing is left active: the burst that could not be queued is FAILED, and says why.
    burst = Burst.objects.get(session=session)
    assert burst.status == Burst.Status.FAILED
    row = JournalEvent.objects.get(burst=burst, kind="burst_failed")
    assert "could not be queued" in row.message

    # Without JavaScript: the whole page, same status and sentence.
    page = run_burst(owner, session, htmx=False)
    assert page.status_code == 503
    assert "reconnecting" in page.content.decode()
    assert not Burst.objects.filter(session=session, status__in=Burst.ACTIVE_STATUSES).exists()

    # Redis back: the next click queues a burst on the broker, no 409 in the way.
    broker.start()
    again = run_burst(owner, session)
    assert again.status_code == 200, again.content.decode()
    assert Burst.objects.get(session=session, status=Burst.Status.QUEUED).number == 3
    assert broker.queued() == 1


def test_run_burst_with_all_of_redis_down_answers_503_and_starts_nothing(
    broker, session, owner, settings
):
    """The rate limit's counter is in the cache, on the same Redis: when it cannot be read the
    answer is the same 503, and no burst is even created."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": broker.url.removesuffix("/0") + "/1",
            "KEY_PREFIX": "fl",
        }
    }
    broker.stop()
    response = run_burst(owner, session)
    assert response.status_code == 503
    assert "reconnecting" in response.content.decode()
    assert not Burst.objects.filter(session=session).exists()
    broker.start()
    again = run_burst(owner, session)
    assert again.status_code == 200, again.content.decode()
