"""At most ``LAB_HTTP_CONCURRENCY`` HTTP requests in Django at once, per web process.

Django runs a sync view under ASGI in a thread of the request's own. A hundred students
pressing Run burst in the same instant meant a hundred threads running Python beside the one
thread that forwards every live push (daphne's event loop), and the interpreter lock is shared
in turns: the loop got its turn a hundredth of the time and pushes waited (push_bench at 100
sessions shows it, docs/live-page.md). Requests over the limit wait their turn
on the event loop, costing nothing while they wait; websockets are not affected.

The default, 2, is about the cores a web process can use: more threads in Python than that
do not get requests done sooner, they only take turns from the event loop. A long request (a
class's journal export streams for as long as it takes) holds its turn throughout.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable
from typing import Any

from django.db import connection

logger = logging.getLogger(__name__)


class ConcurrencyLimit:
    """ASGI middleware: at most ``limit`` calls of ``app`` in flight on each event loop, and
    of them at most ``hashing_limit`` POSTs to ``hashing_paths``."""

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
        # One pair of semaphores per event loop: a semaphore belongs to the loop that first
        # waits on it, and tests run the application on a new loop each time.
        self._gates: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, asyncio.Semaphore]
        ]
        self._gates = weakref.WeakKeyDictionary()

    async def __call__(self, scope, receive, send) -> None:
        loop = asyncio.get_running_loop()
        gates = self._gates.get(loop)
        if gates is None:
            gates = self._gates[loop] = (
                asyncio.Semaphore(self.limit),
                asyncio.Semaphore(self.hashing_limit),
            )
        gate, hashing_gate = gates
        if self.timing:
            scope = {**scope, TIMING_KEY: {"arrived": time.perf_counter()}}
        if scope.get("method") == "POST" and scope.get("path") in self.hashing_paths:
            # The hashing turn first: a POST waiting for it holds no ordinary turn.
            async with hashing_gate, gate:
                await self._call(scope, receive, send)
            return
        async with gate:
            await self._call(scope, receive, send)

    async def _call(self, scope, receive, send) -> None:
        marks = scope.get(TIMING_KEY)
        if marks is None:
            await self.app(scope, receive, send)
            return
        marks["turn"] = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
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
