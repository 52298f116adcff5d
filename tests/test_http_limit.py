"""The web process lets at most LAB_HTTP_CONCURRENCY requests into Django at once."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from lab_project.http_limit import ConcurrencyLimit


def test_requests_over_the_limit_wait_their_turn_and_all_complete():
    inside = 0
    most = 0
    done: list[int] = []

    async def slow_app(scope, receive, send):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.05)
        inside -= 1
        done.append(scope["n"])

    limited = ConcurrencyLimit(slow_app, 2)

    async def many():
        await asyncio.gather(*(limited({"n": n}, None, None) for n in range(7)))

    async_to_sync(many)()
    assert most == 2
    assert sorted(done) == list(range(7))
    async_to_sync(many)()  # a new event loop gets a gate of its own
    assert len(done) == 14


def test_a_failing_request_gives_its_turn_back():
    async def broken(scope, receive, send):
        raise RuntimeError("view crashed")

    limited = ConcurrencyLimit(broken, 1)

    async def twice():
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await asyncio.wait_for(limited({}, None, None), 1)

    async_to_sync(twice)()


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ConcurrencyLimit(lambda *a: None, 0)


def test_the_web_application_limits_http_and_not_websockets(settings):
    from lab_project.asgi import application

    http = application.application_mapping["http"]
    assert isinstance(http, ConcurrencyLimit)
    assert http.limit == settings.LAB_HTTP_CONCURRENCY == 2
    assert not isinstance(application.application_mapping["websocket"], ConcurrencyLimit)
