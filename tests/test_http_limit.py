"""The web process lets at most LAB_HTTP_CONCURRENCY requests into Django at once."""

from __future__ import annotations

import asyncio
import threading

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


def _held_app(entered: list[str], release: dict[str, asyncio.Event]):
    """An app that records who is inside and stays there until its event is set."""

    async def app(scope, receive, send):
        entered.append(scope["name"])
        await release[scope["name"]].wait()

    return app


def _http(name: str, method: str, path: str) -> dict:
    return {"type": "http", "method": method, "path": path, "name": name}


def test_password_posts_take_one_turn_at_a_time_and_pages_still_get_in():
    """A second login POST waits for the first, while a page request takes the other turn:
    password hashing never holds more than one of the turns."""
    entered: list[str] = []

    async def scenario():
        release = {n: asyncio.Event() for n in ("login1", "login2", "page", "signup")}
        limited = ConcurrencyLimit(
            _held_app(entered, release), 2, hashing_paths={"/accounts/login/", "/signup/"}
        )
        tasks = [
            asyncio.create_task(limited(_http("login1", "POST", "/accounts/login/"), None, None))
        ]
        while "login1" not in entered:
            await asyncio.sleep(0)
        tasks.append(
            asyncio.create_task(limited(_http("login2", "POST", "/accounts/login/"), None, None))
        )
        tasks.append(asyncio.create_task(limited(_http("signup", "POST", "/signup/"), None, None)))
        for _ in range(20):
            await asyncio.sleep(0)
        tasks.append(asyncio.create_task(limited(_http("page", "GET", "/sessions/1/"), None, None)))
        await asyncio.wait_for(_until(lambda: "page" in entered), 5)
        assert entered == ["login1", "page"]  # the second login and the sign-up wait
        release["login1"].set()
        await asyncio.wait_for(_until(lambda: len(entered) == 3), 5)
        assert entered[2] in {"login2", "signup"}
        for event in release.values():
            event.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    async_to_sync(scenario)()
    assert sorted(entered) == ["login1", "login2", "page", "signup"]


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


def test_a_get_of_the_login_page_is_an_ordinary_request():
    entered: list[str] = []

    async def scenario():
        release = {n: asyncio.Event() for n in ("login", "form1", "form2")}
        limited = ConcurrencyLimit(
            _held_app(entered, release), 3, hashing_paths={"/accounts/login/"}
        )
        tasks = [
            asyncio.create_task(limited(_http("login", "POST", "/accounts/login/"), None, None)),
            asyncio.create_task(limited(_http("form1", "GET", "/accounts/login/"), None, None)),
            asyncio.create_task(limited(_http("form2", "GET", "/accounts/login/"), None, None)),
        ]
        await asyncio.wait_for(_until(lambda: len(entered) == 3), 5)
        for event in release.values():
            event.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    async_to_sync(scenario)()


def test_the_web_application_puts_every_password_form_in_the_hashing_lane():
    from django.urls import reverse

    from lab_project.asgi import application

    http = application.application_mapping["http"]
    assert http.hashing_limit == 1
    for name in ("login", "admin:login", "labs:signup", "password_change"):
        assert reverse(name) in http.hashing_paths, name


@pytest.mark.django_db
def test_a_request_crosses_between_the_event_loop_and_a_thread_a_few_times_only(monkeypatch):
    """Each hand-off between daphne's event loop and a request thread (``sync_to_async`` or
    ``async_to_sync``) waits for the loop's turn, and the loop is busy forwarding pushes to
    every page. Django's middleware runs as one synchronous chain in the request's thread, so
    a request pays a handful of them, not two per middleware."""
    from asgiref import sync
    from channels.testing import HttpCommunicator
    from django.urls import reverse

    from lab_project.asgi import application

    crossings: list[str] = []
    for cls in (sync.SyncToAsync, sync.AsyncToSync):
        original = cls.__call__

        def counted(self, *args, _original=original, _name=cls.__name__, **kwargs):
            crossings.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__call__", counted)

    async def get_login_page():
        communicator = HttpCommunicator(
            application, "GET", reverse("login"), headers=[(b"host", b"localhost")]
        )
        return await communicator.get_response(10)

    response = async_to_sync(get_login_page)()
    assert response["status"] == 200
    assert len(crossings) <= 8, f"{len(crossings)} crossings: {crossings}"


def test_with_timing_each_request_logs_where_its_time_went(caplog):
    """LAB_REQUEST_TIMING: one line per request, with the wait for a turn and the query count
    that the synchronous chain records in the request's marks."""
    from lab_project.http_limit import TIMING_KEY

    async def app(scope, receive, send):
        marks = scope[TIMING_KEY]
        marks.update(entered=marks["turn"], left=marks["turn"], queries=3, query_s=0.002)
        await asyncio.sleep(0.01)

    limited = ConcurrencyLimit(app, 1, timing=True)

    async def two():
        await asyncio.gather(
            *(limited({"method": "POST", "path": f"/p{n}/"}, None, None) for n in range(2))
        )

    with caplog.at_level("INFO", logger="lab_project.http_limit"):
        async_to_sync(two)()
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "lab_project.http_limit")
    assert [line.split(":")[0] for line in lines] == ["POST /p0/", "POST /p1/"]
    assert all("(3 queries 2.0)" in line and "turn " in line for line in lines)


def test_without_timing_the_scope_carries_no_marks():
    scopes = []

    async def app(scope, receive, send):
        scopes.append(scope)

    async_to_sync(ConcurrencyLimit(app, 1))({"method": "GET", "path": "/"}, None, None)
    assert "lab.timing" not in scopes[0]


def test_each_turn_runs_its_requests_in_one_thread_of_its_own():
    """Django's synchronous part of a request (here: what it does, a ThreadSensitiveContext
    of its own and a thread-sensitive call inside) runs in its turn's thread, the same one
    request after request: not a new thread per request, and not the event loop's."""
    from asgiref.sync import ThreadSensitiveContext, sync_to_async

    seen: list[int] = []

    async def django_like(scope, receive, send):
        async with ThreadSensitiveContext():
            seen.append(await sync_to_async(threading.get_ident, thread_sensitive=True)())
            await asyncio.sleep(0.01)

    limited = ConcurrencyLimit(django_like, 2)

    async def scenario():
        loop_thread = threading.get_ident()
        for _ in range(5):
            await limited({"type": "http"}, None, None)
        assert len(set(seen)) == 1, seen
        await asyncio.gather(*(limited({"type": "http"}, None, None) for _ in range(6)))
        assert len(set(seen)) == 2, seen  # two turns, two threads
        assert loop_thread not in seen

    async_to_sync(scenario)()
    assert len(seen) == 11


@pytest.mark.django_db
def test_requests_keep_their_database_connection_from_one_to_the_next():
    """Through the real application: three requests in a row start in the same thread and
    find the connection the first one opened there (a new connection per request cost
    about 0.8 ms on SQLite)."""
    from channels.testing import HttpCommunicator
    from django.core.signals import request_started
    from django.db import connection
    from django.urls import reverse

    from lab_project.asgi import application

    seen: list[tuple[int, int]] = []

    def started(**kwargs):
        connection.ensure_connection()
        seen.append((threading.get_ident(), id(connection.connection)))

    async def get_login_page():
        communicator = HttpCommunicator(
            application, "GET", reverse("login"), headers=[(b"host", b"localhost")]
        )
        return await communicator.get_response(10)

    async def three():
        return [await get_login_page() for _ in range(3)]

    request_started.connect(started)
    try:
        responses = async_to_sync(three)()
    finally:
        request_started.disconnect(started)
    assert [r["status"] for r in responses] == [200, 200, 200]
    assert len(seen) == 3
    assert len(set(seen)) == 1, seen
