"""The storm panel's websocket: ``ws/classes/<id>/storm/``.

Only the class's instructors are let in (4403 otherwise). Every ``TICK_S`` the consumer
reads the class's shared dependency from Redis once and pushes the last ``RESEND_S`` seconds
again (a second's counters keep changing after it has passed); a snapshot goes out on
connect, after a gap, after the channel layer reconnects and when the page asks. Message
shapes: docs/live-page.md, "The sockets' messages".
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
from labs.engine.shared import SharedConfig
from labs.live import metrics
from labs.presenters.storm import class_retries, storm_headline, student_rows
from labs.selectors.access import teaches, teaching
from labs.selectors.storm import (
    STORM_WINDOW_S,
    storm_chain,
    storm_config,
    storm_now,
    storm_sessions,
)

logger = logging.getLogger(__name__)

#: Half a second: an attempt counted in Redis reaches the page within a tick and a read
#: (a whole second sits at the latency target's edge: docs/scaling.md, "Figures behind the code").
TICK_S = 0.5
RESEND_S = 6
SESSIONS_EVERY_S = 5.0
REFRESH_INTERVAL_S = 1.0


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
    _config: SharedConfig | None = None

    def _keep(
        self, now: int, seconds: list[dict[str, Any]], model: dict[str, Any], fresh: bool
    ) -> dict[str, Any]:
        """Hold the window's seconds (a snapshot replaces them, a tick updates its own) and
        return the tiles computed from them (``storm_headline``), the load's region against
        the model's capacity and the class's largest retry count, taken from the list of
        sessions the consumer already holds (no read of its own)."""
        if fresh or self._held is None:
            self._held = {}
        for row in seconds:
            self._held[row["second"]] = row
        oldest = now - STORM_WINDOW_S + 1
        for sec in [sec for sec in self._held if sec < oldest]:
            del self._held[sec]
        return storm_headline(
            list(self._held.values()), self._trigger, now,
            capacity_per_s=model["capacity_per_s"], retries=class_retries(self._sessions or []),
        )  # fmt: skip

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
        self.keep_checking(teaching, classroom_id)
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

    async def _read(self, back_s: int, *, fresh: bool) -> dict[str, Any]:
        """The class's shared dependency now, with every session's own counters: one read of
        Redis (:func:`labs.selectors.storm.storm_now`; the sessions' only when the second
        has moved on since the table last went out). The list of sessions and the saved
        settings (shown while Redis has lost the model's) come from the database before it,
        the list every ``SESSIONS_EVERY_S``, the settings with each snapshot."""
        if fresh or self._config is None:
            self._config = await read(storm_config)(self.classroom_id)
        if self._sessions is None or time.monotonic() - self._sessions_at >= SESSIONS_EVERY_S:
            self._sessions = await read(storm_sessions)(self.classroom_id)
            self._sessions_at = time.monotonic()
        ids = [s["session"] for s in self._sessions]
        unless = None if fresh else self._students_now
        read_now = await read_redis(storm_now)(self.classroom_id, back_s, ids, self._config, unless)
        if "window" in read_now and any(s["tier"] for s in self._sessions):
            read_now["chain"] = await read_redis(storm_chain)(
                self.classroom_id, self._sessions, read_now["now"]
            )
        return read_now

    def _students(self, read_now: dict[str, Any]) -> list[dict[str, Any]]:
        self._students_now = read_now["now"]
        return student_rows(self._sessions or [], read_now["window"], read_now["now"])

    async def _send_snapshot(self) -> None:
        self._last_refresh = time.monotonic()
        read_now = await self._read(STORM_WINDOW_S - 1, fresh=True)
        now, seconds, model = read_now["now"], read_now["seconds"], read_now["model"]
        self._last_now = now
        self._trigger = model.get("trigger")
        await self.send_json(
            {
                "type": "snapshot",
                "now": now,
                "window_s": STORM_WINDOW_S,
                "seconds": seconds,
                "model": model,
                "students": self._students(read_now),
                "chain": read_now.get("chain"),
                "headline": self._keep(now, seconds, model, fresh=True),
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
        read_now = await self._read(RESEND_S, fresh=False)
        now, seconds, model = read_now["now"], read_now["seconds"], read_now["model"]
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
            "headline": self._keep(now, seconds, model, fresh=False),
        }
        if now != self._students_now:
            message["students"] = self._students(read_now)
            message["chain"] = read_now.get("chain")
        await self.send_json(message)
