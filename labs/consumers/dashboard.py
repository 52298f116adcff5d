"""The class dashboard's and predictions page's websocket: ``ws/classes/<id>/``.

Only the class's instructors are let in (4403 otherwise). The consumer joins the class's
group before it sends a snapshot, and updates carry deltas that a lost message would leave
short, so it sends a fresh snapshot after updates settle, while they keep coming and after
the channel layer reconnects, always from its own message loop so nothing overtakes an
update. Message shapes: docs/live-page.md, "The sockets' messages".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string

from labs.consumers.base import CLOSE_FORBIDDEN, DirectDispatch, RightCheck, SocketLimits, read
from labs.journal.broadcast import class_group
from labs.live import metrics
from labs.presenters.dashboard import dashboard_labels, progress_text, row_message
from labs.presenters.predictions import predictions_page
from labs.selectors.access import teaches, teaching
from labs.selectors.dashboard import class_dashboard_rows, simulated_session_ids
from labs.selectors.predictions import class_predictions_page, progress_fields, session_progress

REFRESH_INTERVAL_S = 1.0
SETTLE_S = 1.5
RESYNC_BUSY_S = 15.0
PREDICTIONS_TEMPLATE = "labs/class_predictions.html#prediction-histograms"


def dashboard_snapshot(classroom_id: int) -> list[dict[str, Any]]:
    """The dashboard's rows as the snapshot sends them, each with its HTML."""
    return [row_message(row) for row in class_dashboard_rows(classroom_id=classroom_id)]


def predictions_html(classroom_id: int) -> str:
    """The predictions page's live part for class ``classroom_id`` (a thread, not the loop)."""
    from labs.models import Classroom

    classroom = Classroom.objects.get(pk=classroom_id)
    page = predictions_page(class_predictions_page(classroom))
    return render_to_string(PREDICTIONS_TEMPLATE, page)


class ClassDashboardConsumer(DirectDispatch, SocketLimits, RightCheck, AsyncJsonWebsocketConsumer):
    """Forwards a class's ``class.sessions`` updates to one instructor's dashboard page."""

    group: str | None = None
    classroom_id: int = 0
    #: ``dashboard`` (the class dashboard's table) or ``predictions`` (the predictions page).
    view = "dashboard"
    _last_refresh = 0.0
    _settle: asyncio.Task | None = None
    #: Sessions of simulated students, as of the last snapshot: their updates are not sent.
    _hidden: frozenset[int] | set[int] = frozenset()

    async def connect(self) -> None:
        self.classroom_id = int(self.scope["url_route"]["kwargs"]["classroom_id"])
        if b"view=predictions" in self.scope.get("query_string", b"").split(b"&"):
            self.view = "predictions"
        user = self.scope.get("user")
        await self.accept()
        allowed = user is not None and user.is_authenticated
        if not allowed or not await read(teaches)(user, self.classroom_id):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        classroom_id = self.classroom_id
        self.keep_checking(teaching, classroom_id)
        self.group = class_group(self.classroom_id)
        metrics.socket_opened("dashboard")
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._send_snapshot()

    async def disconnect(self, code: int) -> None:
        if self._settle is not None:
            self._settle.cancel()
        if self.group is not None:
            metrics.socket_closed("dashboard")
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs) -> None:
        if self.group is None or not isinstance(content, dict):
            return
        due = time.monotonic() - self._last_refresh >= REFRESH_INTERVAL_S
        if content.get("type") == "refresh" and due:
            await self._send_snapshot()

    async def _send_snapshot(self) -> None:
        self._last_refresh = time.monotonic()
        if self.view == "predictions":
            html = await read(predictions_html)(self.classroom_id)
            await self.send_json({"type": "predictions", "html": html})
            return
        rows = await read(dashboard_snapshot)(self.classroom_id)
        # Simulated students' sessions are not rows of the dashboard (it counts them apart):
        # their updates are dropped here, or the page would ask for a snapshot at every one.
        self._hidden = await read(simulated_session_ids)(self.classroom_id)
        await self.send_json({"type": "snapshot", "rows": rows, "at": time.time()})

    async def class_sessions(self, event: dict[str, Any]) -> None:
        """A journal batch's compact update of each session of the class it touched (one
        message per class per batch), sent on as one ``session`` message per session, with
        the words the page shows for its fields (labs.presenters.dashboard.dashboard_labels)."""
        if self.group is None or self.view == "predictions":
            return
        for update in event.get("sessions", ()):
            if update.get("session") in self._hidden:
                continue
            await self.send_json(
                {**update, **dashboard_labels(update), "type": "session"}
            )
        if time.monotonic() - self._last_refresh >= RESYNC_BUSY_S:
            await self._send_snapshot()
        else:
            self._settle_later()

    async def class_session(self, event: dict[str, Any]) -> None:
        """One session's update alone (the shape :meth:`class_sessions` carries several of)."""
        await self.class_sessions({"sessions": [event]})

    async def class_progress(self, event: dict[str, Any]) -> None:
        """A session's step progress or predictions changed: its progress (the dashboard) or
        the predictions page's live part, read now."""
        if self.group is None:
            return
        if self.view == "predictions":
            await self._send_snapshot()
            return
        try:
            session_id = int(event["session"])
        except (KeyError, TypeError, ValueError):
            return
        if session_id in self._hidden:
            return
        row = await read(session_progress)(session_id)
        if row is None or row["session"].classroom_id != self.classroom_id:
            return
        progress = progress_fields(row)
        await self.send_json(
            {
                "type": "progress",
                "session": session_id,
                "progress": progress,
                "progress_text": progress_text(progress),
            }
        )
        self._settle_later()

    async def layer_reconnected(self, event: dict[str, Any]) -> None:
        """The channel layer lost Redis and has subscribed again (labs.live.channel_layer):
        updates published meanwhile reached nobody, so send the truth now, and once more after
        the quiet period for an update published while the subscription was being renewed."""
        if self.group is not None:
            await self._send_snapshot()
            self._settle_later()

    def _settle_later(self) -> None:
        """(Re)arm the quiet-period snapshot."""
        if self._settle is not None:
            self._settle.cancel()
        self._settle = asyncio.ensure_future(self._ask_for_settle())

    async def _ask_for_settle(self) -> None:
        await asyncio.sleep(SETTLE_S)
        self._settle = None
        # Through the channel layer to ourselves: handled in order with the updates.
        await self.channel_layer.send(self.channel_name, {"type": "dashboard.settle"})

    async def dashboard_settle(self, event: dict[str, Any]) -> None:
        """Updates have stopped for a while: a fresh snapshot corrects any lost update."""
        if self.group is not None and self._settle is None:
            await self._send_snapshot()
