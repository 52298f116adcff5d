"""The storm panel's websocket: ``ws/classes/<id>/storm/``.

Only instructors of the class (``teaches``) are let in; anyone else, students and
other classes' instructors included, is closed with code 4403 right after the handshake.

The consumer pushes a message every ``TICK_S`` (half a second) from its own loop, reading
the class's shared dependency in Redis once per tick (an ``HMGET`` of the seconds it sends,
never the whole counters hash) and never because a browser asked: a page that polls nothing
still gets every second. Counters of a second keep changing after it has passed (a timeout
is counted when the client gives up, wasted server time when the server finishes), so every
tick sends the last ``RESEND_S`` seconds again and the page replaces them by second.

Messages to the page (JSON):

- ``{"type": "snapshot", "now": s, "window_s", "seconds": [second, ...], "model": {...},
  "students": [...], "headline": {...}}``: the last ``STORM_WINDOW_S`` seconds
  (``Second.to_dict`` each, zero rows for quiet seconds), the model's settings, capacity and
  latest trigger (``storm_model_state``), the per-student table
  (``storm_students``: the sessions' own counters in Redis over the last complete
  seconds) and the tiles with the recovery clock (``storm_headline``, computed
  here from the seconds this consumer holds, complete seconds only). Sent on connect, when a
  tick finds it has fallen more than ``RESEND_S`` seconds behind (a gap: the seconds in
  between would be missing), and when the page asks.
- ``{"type": "tick", "now": s, "seconds": [...], "model": {...}, "headline": {...}}``: the
  last ``RESEND_S`` seconds up to ``now`` (the current one so far), and ``students`` whenever
  ``now`` has moved on since the table last went out (once a second); the list of sessions
  (names, scenarios) is read from the database every ``SESSIONS_EVERY_S`` seconds.

After the channel layer has lost Redis and subscribed again (``layer.reconnected``), a
snapshot too. The page may send ``{"type": "refresh"}`` (it saw a hole in its series) and gets a snapshot,
at most one per ``REFRESH_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from labs.consumers.base import (
    CLOSE_FORBIDDEN,
    DirectDispatch,
    RightCheck,
    SocketLimits,
    read,
    read_redis,
)
from labs.live import metrics
from labs.presenters.storm import storm_headline
from labs.selectors.access import teaches
from labs.selectors.storm import (
    STORM_WINDOW_S,
    storm_model_state,
    storm_now_s,
    storm_seconds,
    storm_sessions,
    storm_students,
)

logger = logging.getLogger(__name__)

#: Half a second: an attempt counted in Redis reaches the page within a tick and a read
#: (benchmarks/storm_panel_bench.py; with a 1 s tick its p99 was 1.0 s, the target's edge).
TICK_S = 0.5
RESEND_S = 6
SESSIONS_EVERY_S = 5.0
REFRESH_INTERVAL_S = 1.0


def _series(classroom_id: int, first: int | None) -> tuple[int, list[dict[str, Any]], dict]:
    """(now, the seconds from ``first`` (or the whole window) to now, the model's state)."""
    now = storm_now_s(classroom_id)
    start = now - STORM_WINDOW_S + 1 if first is None else max(first, now - RESEND_S)
    return (
        now,
        storm_seconds(classroom_id, start, now),
        storm_model_state(classroom_id),
    )


class StormPanelConsumer(DirectDispatch, SocketLimits, RightCheck, AsyncJsonWebsocketConsumer):
    """Streams a class's shared-dependency counters, a point a second (refreshed every half
    second), to one instructor."""

    classroom_id: int = 0
    allowed = False
    _loop: asyncio.Task | None = None
    _last_now: int | None = None
    _last_refresh = 0.0
    _trigger: dict[str, Any] | None = None
    _held: dict[int, dict[str, Any]] | None = None
    _students_now: int | None = None
    _sessions: list[dict[str, Any]] | None = None
    _sessions_at = 0.0

    def _keep(self, now: int, seconds: list[dict[str, Any]], fresh: bool) -> dict[str, Any]:
        """Hold the window's seconds (a snapshot replaces them, a tick updates its own) and
        return the tiles computed from them (``storm_headline``)."""
        if fresh or self._held is None:
            self._held = {}
        for row in seconds:
            self._held[row["second"]] = row
        oldest = now - STORM_WINDOW_S + 1
        for sec in [sec for sec in self._held if sec < oldest]:
            del self._held[sec]
        return storm_headline(list(self._held.values()), self._trigger, now)

    async def connect(self) -> None:
        self.classroom_id = int(self.scope["url_route"]["kwargs"]["classroom_id"])
        user = self.scope.get("user")
        await self.accept()
        allowed = user is not None and user.is_authenticated
        if not allowed or not await read(teaches)(user, self.classroom_id):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.allowed = True
        classroom_id = self.classroom_id
        self.keep_checking(lambda user: teaches(user, classroom_id))
        metrics.socket_opened("storm")
        await self._send_snapshot()
        self._loop = asyncio.ensure_future(self._run())

    async def disconnect(self, code: int) -> None:
        if self._loop is not None:
            self._loop.cancel()
        if self.allowed:
            metrics.socket_closed("storm")

    async def receive_json(self, content: Any, **kwargs) -> None:
        if not self.allowed or not isinstance(content, dict):
            return
        due = time.monotonic() - self._last_refresh >= REFRESH_INTERVAL_S
        if content.get("type") == "refresh" and due:
            await self._send_snapshot()

    async def layer_reconnected(self, event: dict[str, Any]) -> None:
        """The channel layer lost Redis and has subscribed again (labs.live.channel_layer
        sends this to every channel of the process). The stream does not come through the
        layer, but Redis was away: a snapshot makes sure no second is left stale."""
        if self.allowed:
            await self._send_snapshot()

    async def _students(self, now: int) -> list[dict[str, Any]]:
        if self._sessions is None or time.monotonic() - self._sessions_at >= SESSIONS_EVERY_S:
            self._sessions = await read(storm_sessions)(self.classroom_id)
            self._sessions_at = time.monotonic()
        self._students_now = now
        return await read_redis(storm_students)(self.classroom_id, now, self._sessions)

    async def _send_snapshot(self) -> None:
        self._last_refresh = time.monotonic()
        now, seconds, model = await read_redis(_series)(self.classroom_id, None)
        students = await self._students(now)
        self._last_now = now
        self._trigger = model.get("trigger")
        await self.send_json(
            {
                "type": "snapshot",
                "now": now,
                "window_s": STORM_WINDOW_S,
                "seconds": seconds,
                "model": model,
                "students": students,
                "headline": self._keep(now, seconds, fresh=True),
            }
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # a Redis blip must not end the stream: the next tick retries
                logger.exception("storm panel %s: tick failed", self.classroom_id)

    async def _tick(self) -> None:
        first = self._last_now - RESEND_S if self._last_now is not None else None
        now, seconds, model = await read_redis(_series)(self.classroom_id, first)
        if self._last_now is None or now - self._last_now > RESEND_S:
            await self._send_snapshot()  # a gap the resent seconds do not cover
            return
        self._last_now = now
        self._trigger = model.get("trigger")
        message: dict[str, Any] = {
            "type": "tick",
            "now": now,
            "seconds": seconds,
            "model": model,
            "headline": self._keep(now, seconds, fresh=False),
        }
        if now != self._students_now:
            message["students"] = await self._students(now)
        await self.send_json(message)
