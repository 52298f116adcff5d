"""At most ``LAB_HTTP_CONCURRENCY`` HTTP requests in Django at once, per web process.

Every thread running Python takes turns at the interpreter lock with daphne's event loop,
which forwards every live push; a classful of simultaneous requests would starve it.
Requests over the limit wait on the event loop at no cost; websockets are not affected.
Each turn keeps one thread for the life of the process and runs its requests' synchronous
part there, so the thread's database connection is kept between requests (``CONN_MAX_AGE``
applies) instead of opened per request. Why 2, and the figures: docs/live-page.md, docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.db import connection

logger = logging.getLogger(__name__)


class _Turns:
    """The turns of one event loop: a semaphore for them, one for the hashing lane, and one
    single-thread executor per turn (the free ones in ``free``)."""

    __slots__ = ("free", "gate", "hashing_gate")

    def __init__(self, limit: int, hashing_limit: int) -> None:
        self.gate = asyncio.Semaphore(limit)
        self.hashing_gate = asyncio.Semaphore(hashing_limit)
        self.free = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"http-turn-{n}")
            for n in range(limit)
        ]


class ConcurrencyLimit:
    """ASGI middleware: at most ``limit`` calls of ``app`` in flight on each event loop, and
    of them at most ``hashing_limit`` POSTs to ``hashing_paths``; each call's
    thread-sensitive synchronous work (all of Django's) runs in its turn's own thread."""

    def __init__(
        self,
        app: Any,
        limit: int,
        *,
        hashing_paths: Iterable[str] = (),
        hashing_limit: int = 1,
        timing: bool = False,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1 (got {limit})")
        if not 1 <= hashing_limit <= limit:
            raise ValueError(
                f"hashing_limit must be between 1 and limit ({limit}) (got {hashing_limit})"
            )
        self.app = app
        self.limit = limit
        self.hashing_paths = frozenset(hashing_paths)
        self.hashing_limit = hashing_limit
        self.timing = timing
        # The turns of each event loop: a semaphore belongs to the loop that first waits on
        # it, and tests run the application on a new loop each time (a loop's turn threads
        # end when the loop is gone and its executors with it).
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns]
        self._turns = weakref.WeakKeyDictionary()

    async def __call__(self, scope, receive, send) -> None:
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = _Turns(self.limit, self.hashing_limit)
        if self.timing:
            scope = {**scope, TIMING_KEY: {"arrived": time.perf_counter()}}
        if scope.get("method") == "POST" and scope.get("path") in self.hashing_paths:
            # The hashing turn first: a POST waiting for it holds no ordinary turn.
            async with turns.hashing_gate, turns.gate:
                await self._call(turns, scope, receive, send)
            return
        async with turns.gate:
            await self._call(turns, scope, receive, send)

    async def _call(self, turns: _Turns, scope, receive, send) -> None:
        # Holding the gate, a free executor is always there (as many as the gate's turns);
        # the most recently used one first, so a quiet site keeps using one connection.
        executor = turns.free.pop()
        marks = scope.get(TIMING_KEY)
        if marks is not None:
            marks["turn"] = time.perf_counter()
        try:
            # Django's own per-request ThreadSensitiveContext, inside this one, finds a
            # context set and leaves it: its sync_to_async calls run on this executor.
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            turns.free.append(executor)
            if marks is not None:
                log_timing(scope, marks, time.perf_counter())


#: Where ``ConcurrencyLimit`` (with ``timing``) and ``SynchronousChain`` put a request's marks.
TIMING_KEY = "lab.timing"


def log_timing(scope: dict[str, Any], marks: dict[str, Any], done: float) -> None:
    """One line: where a request's time went (ms), from the marks of its way through."""
    arrived, turn = marks["arrived"], marks["turn"]
    entered, left = marks.get("entered", turn), marks.get("left", done)
    logger.info(
        "%s %s: %.1f ms = turn %.1f, into thread %.1f, django %.1f (%d queries %.1f), "
        "back %.1f",
        scope.get("method"), scope.get("path"), (done - arrived) * 1000,
        (turn - arrived) * 1000, (entered - turn) * 1000, (left - entered) * 1000,
        marks.get("queries", 0), marks.get("query_s", 0.0) * 1000, (done - left) * 1000,
    )  # fmt: skip


class SynchronousChain:
    """Django middleware, last in ``MIDDLEWARE``: runs the whole middleware chain as one
    synchronous call in the request's thread.

    Django adapts each middleware to the mode of the one inside it. Whitenoise's is
    synchronous only, so the middleware under it ran in asynchronous mode on daphne's event
    loop, and each of those (``MiddlewareMixin``) runs its ``process_request`` and
    ``process_response`` through ``sync_to_async``: about seventeen hand-offs between the loop
    and the request's thread per request, each waiting for the loop's turn while it forwards
    every page's pushes. Being synchronous only, this one makes every middleware above it
    synchronous too: a request enters its thread once and hands the view's call to the loop
    and back once (Django's own sync-view path), whatever the number of middleware.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        marks = getattr(request, "scope", {}).get(TIMING_KEY)
        if marks is None:
            return self.get_response(request)
        # The request's timing marks (``LAB_REQUEST_TIMING``): its queries counted and timed.
        marks["entered"] = time.perf_counter()

        def timed(execute, sql, params, many, context):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                marks["queries"] = marks.get("queries", 0) + 1
                marks["query_s"] = marks.get("query_s", 0.0) + time.perf_counter() - started

        try:
            with connection.execute_wrapper(timed):
                return self.get_response(request)
        finally:
            marks["left"] = time.perf_counter()
