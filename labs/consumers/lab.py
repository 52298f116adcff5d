"""The live lab page's websocket, ``ws/sessions/<id>/?after=<seq>``: one session's journal,
badge and summary as they happen, plus Run burst clicks and, in shared mode, the class's
shared dependency once a second.

Only those who may see the session are let in (4403 otherwise). The consumer joins the
session's group before it replays the journal and drops what it already sent, so each
connection gets every row exactly once, in order, with no gap that outlives a second. Live
pushes cost no query. Message shapes and guarantees: docs/live-page.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

from labs.clicks import socket_run_burst
from labs.consumers.base import (
    CLOSE_FORBIDDEN,
    DirectDispatch,
    RightCheck,
    SocketLimits,
    act,
    clip,
    read,
    read_redis,
)
from labs.journal import broadcast, rows, seconds
from labs.journal.kinds import BURST_END_KINDS
from labs.live import metrics
from labs.presenters.lab_page import SUMMARY_KINDS, badge, render_badge, summary_update
from labs.presenters.storm import session_card, shared_page_message
from labs.selectors.access import session_policy, socket_session, watchable_sessions
from labs.selectors.lab import (
    breaker_now,
    burst_facts_by_id,
    count_after,
    newest_seq,
    rows_after,
    traffic_seconds,
)
from labs.selectors.storm import session_shared_classroom, storm_now, storm_sessions_now

logger = logging.getLogger(__name__)

#: Rows per replay message.
REPLAY_CHUNK = 200
#: A client further behind than this reloads the page instead (it shows the newest rows).
MAX_REPLAY = 5000
#: Quiet time after a push before checking the journal for rows whose push was dropped.
SETTLE_SECONDS = 1.0
#: ... and after a push of steady traffic's seconds, which come once a second: a check
#: between two of them would find the rows of the second under way, not yet pushed.
SECONDS_SETTLE_S = 2.5

#: Events after which the session's policy (the breaker's settings) may have changed.
POLICY_KINDS = ("policy_set", "session_reset", "scenario_assigned")
#: Events after which the badge is read again besides state changes and a burst's end: a new
#: policy may switch to per-host breakers or back (the badge then shows other breakers), a
#: new dependency may add or drop hosts.
BADGE_KINDS = (*BURST_END_KINDS, *POLICY_KINDS, "dependency_set")
#: Events after which the session's dependency mode (shared or not) may have changed.
MODE_KINDS = (
    "dependency_set", "fault_injected", "fault_restored", "session_reset", "scenario_assigned",
)  # fmt: skip

#: The shared-dependency message: SHARED_PHASE_S after each second of the clock, the last
#: SHARED_RESEND_S seconds (SHARED_FIRST_S in the first, sent at once), one read per class and
#: process a second.
SHARED_RESEND_S = 8
SHARED_FIRST_S = 60
SHARED_PHASE_S = 0.2


def until_shared_tick(now: float) -> float:
    """Seconds from ``now`` (epoch) to the next tick, ``SHARED_PHASE_S`` after a second of the
    clock: every page ticks together just after a second ends, so the second it has just
    counted reaches every page within a fraction of a second, and the class's part is read
    once for them all."""
    return 1.0 - (now - SHARED_PHASE_S) % 1.0


def shared_class_text(classroom_id: int, back_s: int) -> tuple[str, int]:
    """The JSON text of :func:`labs.presenters.storm.shared_page_message` for the class's last
    ``back_s`` seconds, and the second it was read at (Redis's clock)."""
    recent = storm_now(classroom_id, back_s)
    return json.dumps(shared_page_message(recent)), recent["now"]


def shared_texts(classroom_id: int, session_ids: Sequence[int], back_s: int) -> dict[int, str]:
    """For each of ``session_ids``, by id: the class's part (:func:`shared_class_text`) with
    the session's own counters and window figures at the same second spliced in as ``mine``
    (one more read for all the sessions, Redis only)."""
    text, now = shared_class_text(classroom_id, back_s)
    own = storm_sessions_now(classroom_id, session_ids, now, back_s)
    return {
        session_id: f'{text[:-1]}, "mine": {json.dumps(session_card(own[session_id]))}}}'
        for session_id in session_ids
    }


#: The lab pages of this process on their class's shared tick: class -> session ids (a
#: count each: two tabs of one session)
_shared_pages: dict[int, Counter[int]] = {}
#: Each class's tick being read: (second, the sessions it reads, their texts to come)
_shared_ticks: dict[int, tuple[int, frozenset[int], asyncio.Future]] = {}


async def shared_tick_text(classroom_id: int, session_id: int) -> str:
    """The session's shared message at this second's tick, read together with every other
    page of the class in this process (:func:`shared_texts`): pages tick together, the first
    one starts the read and the others wait for it. A page that joined since reads again
    with everyone."""
    second = int(time.time())
    tick = _shared_ticks.get(classroom_id)
    if tick is None or tick[0] != second or session_id not in tick[1]:
        sessions = frozenset(_shared_pages.get(classroom_id, ())) | {session_id}
        future = asyncio.ensure_future(
            read_redis(shared_texts)(classroom_id, sorted(sessions), SHARED_RESEND_S)
        )
        tick = _shared_ticks[classroom_id] = (second, sessions, future)
    # shield: a page closing while it waits must not cancel the read the others wait for
    return (await asyncio.shield(tick[2]))[session_id]


def _watch_shared(classroom_id: int | None, session_id: int, joined: int | None) -> int | None:
    """Move a page from the class it was on the shared tick of (``joined``) to
    ``classroom_id`` (None: none); returns the class it is on now."""
    if joined == classroom_id:
        return joined
    if joined is not None:
        pages = _shared_pages.get(joined)
        if pages is not None:
            pages[session_id] -= 1
            if pages[session_id] <= 0:
                del pages[session_id]
            if not pages:
                del _shared_pages[joined]
    if classroom_id is not None:
        _shared_pages.setdefault(classroom_id, Counter())[session_id] += 1
    return classroom_id


#: Rows kept rendered (:func:`rendered_row`) for the pages of this process.
RENDERED_ROWS_MAX = 4096
_rendered_rows: dict[tuple[int, int, Any, Any], str] = {}


def _row_key(session_id: int, event: dict[str, Any]) -> tuple[int, int, Any, Any]:
    """What names one committed row of one session in this process (see :func:`rendered_row`)."""
    return (session_id, event["seq"], event.get("at"), event.get("emitted"))


def _keep(store: dict, key: Any, value: Any, limit: int = RENDERED_ROWS_MAX) -> None:
    """``store[key] = value``, dropping the oldest entry past ``limit``."""
    if len(store) >= limit:
        del store[next(iter(store))]
    store[key] = value


def rendered_row(session_id: int, event: dict[str, Any]) -> str:
    """The JSON text of ``event`` as a page gets it (the journal payload, ``html`` and
    ``summary_delta``: :func:`labs.journal.rows.row_text`).

    A pushed row brings its text (``text``, rendered once where the push was built, for every
    page of every web process). A row read back from the database is rendered here once for
    every page of this process catching up on it: a committed row never changes; the key
    carries its timestamp and ``emitted`` stamp besides its number, so a session renumbered
    after a database reset is not confused with the old one. The oldest entries go first past
    :data:`RENDERED_ROWS_MAX`.
    """
    text = event.get("text")
    if text is not None:
        return text
    key = _row_key(session_id, event)
    text = _rendered_rows.get(key)
    if text is None:
        text = rows.row_text(event)
        _keep(_rendered_rows, key, text)
    return text


#: Seconds of steady traffic given their words and journal line (:func:`rendered_second`).
_rendered_seconds: dict[tuple[int, int, int, int], dict[str, Any]] = {}


def rendered_second(session_id: int, counted: dict[str, Any]) -> dict[str, Any]:
    """A pushed second (counts only, ``labs.journal.seconds``) as a page gets it, with its
    words and journal line (:func:`labs.journal.rows.with_html`), once in this process for
    every page watching the session: a second's counts are named by its time, the rows it
    counts and its newest row."""
    key = (session_id, counted["t"], counted.get("n", 0), counted.get("seq", 0))
    done = _rendered_seconds.get(key)
    if done is None:
        done = rows.with_html(session_id, counted)
        _keep(_rendered_seconds, key, done)
    return done


#: The summary panel as of a row (:func:`rendered_summary`), and the badge read after a live
#: push's row (:func:`rendered_badge`), kept for the pages of this process.
_rendered_summaries: dict[tuple[int, int, Any, Any], str] = {}
_rendered_badges: dict[tuple[int, int, Any, Any], asyncio.Future] = {}


def rendered_summary(session_id: int, event: dict[str, Any], facts: dict[str, Any]) -> str:
    """The summary panel's data as of ``event`` as JSON text
    (:func:`labs.presenters.lab_page.summary_update`; "" when the panel stays as it is), once
    in this process for every page watching the session. The panel as of a row depends on the
    row and on the burst's number, size and concurrency only, which no later row changes."""
    key = _row_key(session_id, event)
    text = _rendered_summaries.get(key)
    if text is None:
        panel = summary_update(event, facts)
        text = "" if panel is None else json.dumps(panel, default=str)
        _keep(_rendered_summaries, key, text)
    return text


async def rendered_badge(session_id: int, policy: dict[str, Any], event: dict[str, Any]) -> str:
    """The breaker badge's HTML after ``event``: the breaker read from Redis and rendered.

    Every page watching a session gets each push at the same moment, so for a live push
    (``emitted`` set) one read and one render serve them all: the first page starts them and
    the others wait for the same result. A replayed row reads Redis afresh: it may be minutes
    old, and the badge shows the breaker as it is now. A failed read is not kept."""
    if not event.get("emitted"):
        return render_badge(badge(await read_redis(breaker_now)(session_id, policy)))
    key = _row_key(session_id, event)
    pending = _rendered_badges.get(key)
    if pending is None:
        pending = asyncio.ensure_future(_read_badge(session_id, policy))
        _keep(_rendered_badges, key, pending)
        pending.add_done_callback(lambda done: _forget_failed_badge(key, done))
    # shield: a page closing while it waits must not cancel the read the others wait for
    return await asyncio.shield(pending)


def _forget_failed_badge(key: tuple[int, int, Any, Any], done: asyncio.Future) -> None:
    if done.cancelled() or done.exception() is not None:
        _rendered_badges.pop(key, None)


async def _read_badge(session_id: int, policy: dict[str, Any]) -> str:
    return render_badge(badge(await read_redis(breaker_now)(session_id, policy)))


def _per_second_row(payload: dict[str, Any]) -> bool:
    return seconds.per_second(payload.get("kind"), payload.get("burst"))


class LabSessionConsumer(DirectDispatch, SocketLimits, RightCheck, AsyncWebsocketConsumer):
    """Live journal, badge and summary of one lab session (see the module docstring)."""

    session_id: int | None = None
    group: str | None = None
    last_seq: int = 0
    #: the session's policy, kept for the badge (re-read after a POLICY_KINDS event)
    _policy: dict[str, Any] | None = None
    _settle_task: asyncio.Task | None = None
    #: the quiet-time timer (see _arm_settle) and when it is due on the loop's clock
    _settle_timer: asyncio.TimerHandle | None = None
    _settle_at: float = 0.0
    #: the resync replay running, and where the next one starts (None: no resync waiting)
    _replay_task: asyncio.Task | None = None
    _replay_after: int | None = None
    #: the class whose shared dependency the session calls (None: not in shared mode)
    _shared_classroom: int | None = None
    _shared_task: asyncio.Task | None = None
    #: burst id -> what the summary panel needs, learnt from burst_queued events
    _bursts: dict[int, dict[str, Any]]

    async def connect(self) -> None:
        user = self.scope.get("user")
        try:
            session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        except (KeyError, TypeError, ValueError):
            session_id = 0
        found = await read(socket_session)(user, session_id)
        if found is None:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.session_id, newest, self._policy = found
        self._shared_classroom = await read(session_shared_classroom)(self.session_id)
        # Everything that sends rows holds this lock: handlers run one at a time anyway, but
        # the settle timer runs beside them.
        self._deliver_lock = asyncio.Lock()
        self._bursts = {}
        # Join first: a row committed from now on is pushed to us, and every row committed
        # before is in the database for the replay below. Overlap is dropped by seq.
        self.group = broadcast.session_group(self.session_id)
        metrics.socket_opened("lab")
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        session_id = self.session_id
        self.keep_checking(watchable_sessions, session_id)
        after = self._after_from_query()
        # A client claiming rows we never wrote (a stale tab after a database reset) is
        # treated as knowing everything so far; nothing is replayed to it twice.
        self.last_seq = min(after, newest)
        async with self._deliver_lock:
            await self._catch_up()
        await self._send_state()
        self._shared_task = asyncio.ensure_future(self._shared_loop())

    async def disconnect(self, code: int) -> None:
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        for task in (self._settle_task, self._replay_task, self._shared_task):
            if task is not None:
                task.cancel()
        if self.group:
            metrics.socket_closed("lab")
            await self.channel_layer.group_discard(self.group, self.channel_name)

    # -- from the browser ------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        if self.session_id is None:
            return
        try:
            message = json.loads(text_data) if text_data is not None else None
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "ping":
                await self._settle()
                await self._send({"type": "pong", "last_seq": self.last_seq})
            elif kind == "resync":
                after = message.get("after")
                if isinstance(after, bool) or not isinstance(after, int) or after < 0:
                    raise ValueError(f"resync needs a non-negative integer 'after' (got {after!r})")
                self._ask_replay(after)
            elif kind == "run_burst":
                await self._run_burst(message)
            else:
                raise ValueError(f"unknown message {clip(text_data or bytes_data)}")
        except Exception as exc:  # a bad message must never take the socket down
            logger.warning(
                "lab session %s: ignored a malformed websocket message from user %s: %s",
                self.session_id,
                getattr(self.scope.get("user"), "pk", None),
                exc,
            )

    async def _run_burst(self, message: dict[str, Any]) -> None:
        """A Run burst click (module docstring, 5): checked and queued as the form's POST
        would (:func:`labs.clicks.socket_run_burst`), in the actions' thread pool; the reply
        carries the click's ``id`` back."""
        ask = message.get("id")
        if isinstance(ask, bool) or not isinstance(ask, int):
            raise ValueError(f"run_burst needs an integer 'id' (got {ask!r})")
        data = {k: message.get(k) for k in ("size", "concurrency", "step")}
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        grant = self.scope.get("launch_grant")  # a course launch's token, no session cookie
        reply = await act(socket_run_burst)(key, self.session_id, data, grant=grant)
        await self._send({"type": "burst_reply", "id": ask, **reply})

    def _ask_replay(self, after: int) -> None:
        """Replay from ``after`` (what the client says it has; rows it gets twice it drops by
        seq), one replay at a time: a resync while one runs only lowers where the next starts.

        So a socket sending resyncs in a row costs at most the replay running and one more,
        each at most ``MAX_REPLAY`` rows (further back, the page is told to reload), and the
        consumer keeps reading the socket meanwhile."""
        self._replay_after = after if self._replay_after is None else min(self._replay_after, after)
        if self._replay_task is None or self._replay_task.done():
            self._replay_task = asyncio.ensure_future(self._replay())

    async def _replay(self) -> None:
        while self._replay_after is not None:
            after, self._replay_after = self._replay_after, None
            try:
                async with self._deliver_lock:
                    self.last_seq = min(self.last_seq, after)
                    await self._catch_up()
            except Exception:
                logger.exception("lab session %s: replay failed", self.session_id)

    # -- from the channel layer ------------------------------------------------------------

    async def journal_events(self, message: dict[str, Any]) -> None:
        """Newly committed journal rows of this session (``labs.journal.broadcast``)."""
        if self.session_id is None:
            return
        try:
            events = [
                e
                for e in message.get("events") or []
                if isinstance(e, dict) and isinstance(e.get("seq"), int)
            ]
            events.sort(key=lambda e: e["seq"])
            async with self._deliver_lock:
                fresh = [e for e in events if e["seq"] > self.last_seq]
                if fresh and fresh[0]["seq"] > self.last_seq + 1:
                    # A push went missing (see the module docstring): read the gap.
                    await self._catch_up(upto=fresh[0]["seq"] - 1)
                    fresh = [e for e in fresh if e["seq"] > self.last_seq]
                if fresh:
                    await self._send_events(fresh)
        except Exception:
            logger.exception("lab session %s: could not forward journal events", self.session_id)
        self._arm_settle()

    async def traffic_seconds(self, message: dict[str, Any]) -> None:
        """Steady traffic's seconds (``labs.journal.seconds``): rows ``first`` to
        ``through`` of this session, counted, with the seconds they fall in."""
        if self.session_id is None:
            return
        try:
            first, through = message.get("first"), message.get("through")
            if not (isinstance(first, int) and isinstance(through, int) and first <= through):
                raise ValueError(f"seconds without their rows' numbers ({first!r}, {through!r})")
            counted = [
                rendered_second(self.session_id, s)
                for s in message.get("seconds") or []
                if isinstance(s, dict) and isinstance(s.get("t"), int)
            ]
            async with self._deliver_lock:
                if first > self.last_seq + 1:
                    # A push went missing (see the module docstring): read the gap.
                    await self._catch_up(upto=first - 1)
                await self._send_seconds(counted, through, first)
        except Exception:
            logger.exception("lab session %s: could not forward seconds", self.session_id)
        self._arm_settle(SECONDS_SETTLE_S)

    async def layer_reconnected(self, message: dict[str, Any]) -> None:
        """The channel layer lost Redis and has subscribed again (labs.live.channel_layer):
        rows pushed meanwhile reached nobody, so read them now, and once more a moment later
        for a push published while the subscription was being renewed."""
        if self.session_id is None:
            return
        try:
            await self._settle()
        except Exception:
            logger.exception("lab session %s: journal check failed", self.session_id)
        self._arm_settle()

    def _arm_settle(self, quiet: float = SETTLE_SECONDS) -> None:
        """Check the journal once the pushes have been quiet for ``quiet`` seconds.

        Every push moves the due time; one timer per socket follows it (when it fires early it
        waits out the rest), so a push costs a float assignment, not a task created and one
        cancelled."""
        loop = asyncio.get_running_loop()
        self._settle_at = loop.time() + quiet
        if self._settle_timer is None:
            self._settle_timer = loop.call_at(self._settle_at, self._settle_due)

    def _settle_due(self) -> None:
        loop = asyncio.get_running_loop()
        if self._settle_task is not None and not self._settle_task.done():
            self._settle_at = max(self._settle_at, loop.time() + SETTLE_SECONDS)  # look again
        if loop.time() < self._settle_at:
            self._settle_timer = loop.call_at(self._settle_at, self._settle_due)
            return
        self._settle_timer = None
        self._settle_task = asyncio.ensure_future(self._settle_later())

    async def _settle_later(self) -> None:
        try:
            await self._settle()
        except Exception:
            logger.exception("lab session %s: journal check failed", self.session_id)

    async def _settle(self) -> None:
        """Send the rows whose push never came.

        The journal's newest number is read before taking the deliver lock, so pushes keep
        flowing while the query waits (on PostgreSQL, for a pooled connection that a burst of
        Run burst requests may hold for a moment)."""
        assert self.session_id is not None
        newest = await read(newest_seq)(self.session_id)
        async with self._deliver_lock:
            if newest > self.last_seq:
                logger.info(
                    "lab session %s: %d row(s) arrived without a push; sent from the journal",
                    self.session_id,
                    newest - self.last_seq,
                )
                await self._catch_up()

    # -- internals -------------------------------------------------------------------------

    def _after_from_query(self) -> int:
        raw = self.scope.get("query_string", b"").decode("latin-1")
        values = parse_qs(raw).get("after") or ["0"]
        try:
            after = int(values[0])
        except ValueError:
            logger.warning("lab session %s: ignored malformed after=%r", self.session_id, values[0])
            return 0
        return max(after, 0)

    async def _catch_up(self, upto: int | None = None) -> None:
        """Send every row after ``last_seq`` (up to ``upto``) from the database, in order."""
        assert self.session_id is not None
        behind = await read(count_after)(self.session_id, self.last_seq)
        if behind > MAX_REPLAY:
            await self._send({"type": "reload", "reason": f"{behind} rows behind"})
            return
        while True:
            rows = await read(rows_after)(self.session_id, self.last_seq, REPLAY_CHUNK)
            if upto is not None:
                rows = [r for r in rows if r["seq"] <= upto]
            if not rows:
                return
            # Steady traffic's rows go as the seconds they fall in, counted afresh from the
            # journal (every row of each second, also those after ``upto``), as pushed live.
            for counted_by_second, run in seconds.runs(rows, _per_second_row):
                if counted_by_second:
                    wanted = {seconds.second_of(r["t_ms"]) for r in run} - {None}
                    counted = await read(traffic_seconds)(self.session_id, wanted)
                    await self._send_seconds([counted[t] for t in sorted(counted)], run[-1]["seq"])
                else:
                    await self._send_events(run)
            if len(rows) < REPLAY_CHUNK:
                return

    async def _send_events(self, events: list[dict[str, Any]]) -> None:
        """Render and send ``events`` (seq order, all after ``last_seq``)."""
        assert self.session_id is not None
        out = []
        for event in events:
            self._learn_burst(event)
        unknown = sorted(
            {
                e["burst"]
                for e in events
                if e.get("kind") in SUMMARY_KINDS
                and e.get("burst")
                and e["burst"] not in self._bursts
            }
        )
        if unknown:
            self._bursts.update(await read(burst_facts_by_id)(unknown))
        if any(e.get("kind") in MODE_KINDS for e in events):
            self._shared_classroom = await read(session_shared_classroom)(self.session_id)
        if any(e.get("kind") in POLICY_KINDS for e in events):
            # The badge below needs the breaker's settings as they are now.
            self._policy = await read(session_policy)(self.session_id)
        bursts = self._bursts
        # The badge is re-read (Redis) once per message: after the last state change, at a
        # burst's end (its failure streak / window counts are then up to date), or after a
        # change of the policy or the dependency (BADGE_KINDS).
        last_state_change = max(
            (i for i, e in enumerate(events) if e.get("state_to") or e.get("kind") in BADGE_KINDS),
            default=None,
        )
        for i, event in enumerate(events):
            text = rendered_row(self.session_id, event)
            burst = bursts.get(event.get("burst"))
            if burst and event.get("kind") in SUMMARY_KINDS:
                summary = rendered_summary(self.session_id, event, burst)
                if summary:  # this page's own: spliced in as the row's last key
                    text = f'{text[:-1]}, "summary": {summary}}}'
            if i == last_state_change and self._policy is not None:
                html = await rendered_badge(self.session_id, self._policy, event)
                fragments = [{"id": "breaker-badge", "html": html}]
                text = f'{text[:-1]}, "fragments": {json.dumps(fragments)}}}'
            if event.get("kind") in BURST_END_KINDS:
                bursts.pop(event.get("burst"), None)
            out.append(text)
        # One frame for the whole batch, joined from the rows' texts (what json.dumps of
        # {"type": "events", "events": [...]} writes, without encoding each row again).
        await self.send(text_data='{"type": "events", "events": [' + ", ".join(out) + "]}")
        self.last_seq = events[-1]["seq"]

    async def _send_seconds(
        self, counted: list[dict[str, Any]], through: int, first: int = 0
    ) -> None:
        """Send steady traffic's ``counted`` seconds, the rows up to ``through`` had, with the
        breaker badge read again when one of them saw the breaker change. Seconds that come
        again (a page gets a second's counts anew as its rows are written) replace the
        page's: their counts are absolute."""
        assert self.session_id is not None
        if not counted and through <= self.last_seq:
            return
        message: dict[str, Any] = {"type": "seconds", "through": max(through, self.last_seq)}
        message["seconds"] = counted
        if through > self.last_seq and self._policy is not None and any(
            c.get("state_changes") for c in counted
        ):
            # Once per process for every page of the session (a live push: ``first`` names it).
            key_event = {"seq": through, "at": "seconds", "emitted": first or None}
            html = await rendered_badge(self.session_id, self._policy, key_event)
            message["fragments"] = [{"id": "breaker-badge", "html": html}]
        await self._send(message)
        self.last_seq = max(self.last_seq, through)

    async def _shared_loop(self) -> None:
        """Once a second, just after the clock's second ends (:func:`until_shared_tick`), the
        shared dependency's state and the class's totals (module docstring, 4), while the
        session is in shared mode; the first at once, on its own, the others read with the
        class's other pages in this process (:func:`shared_tick_text`)."""
        first, sent, joined = True, False, None
        try:
            while True:
                try:
                    classroom = self._shared_classroom
                    joined = _watch_shared(classroom, self.session_id, joined)
                    if classroom is not None:
                        if first:
                            text = (await read_redis(shared_texts)(
                                classroom, [self.session_id], SHARED_FIRST_S
                            ))[self.session_id]  # fmt: skip
                        else:
                            text = await shared_tick_text(classroom, self.session_id)
                        await self.send(text_data=text)
                        first, sent = False, True
                    elif sent:
                        await self._send({"type": "shared", "active": False})
                        first, sent = True, False
                except asyncio.CancelledError:
                    raise
                except Exception:  # a Redis blip must not end the stream: the next tick retries
                    logger.exception("lab session %s: shared tick failed", self.session_id)
                await asyncio.sleep(until_shared_tick(time.time()))
        finally:
            _watch_shared(None, self.session_id, joined)

    def _learn_burst(self, event: dict[str, Any]) -> None:
        """Remember a burst from its ``burst_queued`` row (it carries number, size and
        concurrency), so its start and end need no query; forget it when it ends.

        Such a burst counts as having its start state recorded (its summary panel links to
        its what-if): a worker records it when it claims the burst. The one exception is a
        tab open since before replay existed catching up on rows written then; its link
        then opens the what-if view, which says the burst cannot be replayed and why."""
        burst_id = event.get("burst")
        if event.get("kind") == "burst_queued" and burst_id:
            data = event.get("data") or {}
            if all(isinstance(data.get(k), int) for k in ("burst", "size", "concurrency")):
                self._bursts[burst_id] = {
                    "id": burst_id,
                    "number": data["burst"],
                    "size": data["size"],
                    "concurrency": data["concurrency"],
                    "status": "queued",
                    "error": "",
                    "recorded": True,
                }

    async def _send_state(self) -> None:
        assert self.session_id is not None
        view = (
            await read_redis(breaker_now)(self.session_id, self._policy) if self._policy else None
        )
        fragments = [{"id": "breaker-badge", "html": render_badge(badge(view))}] if view else []
        await self._send(
            {
                "type": "state",
                "last_seq": self.last_seq,
                "server_now_ms": round(time.time() * 1000),
                "fragments": fragments,
            }
        )

    async def _send(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message, default=str))
