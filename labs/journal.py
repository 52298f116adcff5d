"""The journal: every engine event becomes one ``JournalEvent`` row, then a push.

Two ways in, one way down:

- :func:`append_entries` is the only code that assigns sequence numbers and inserts rows. It
  reserves a block of numbers per session under a row lock (``select_for_update`` on
  PostgreSQL; SQLite's IMMEDIATE transactions serialise writers already), so numbers are unique
  and gap-free per session whichever process writes.
- Request code (a student changing a setting, an instructor injecting a fault) calls
  :func:`record` inside its transaction; the push goes out on commit.
- A burst on a worker hands its events to the process's :class:`JournalWriter` instead. The
  engine's sink only appends to an in-memory queue (about a microsecond), so journaling never
  sits on the clock path of the burst: the timings a student sees are the configured latencies
  and backoffs, not our inserts. The writer thread drains the queue in batches (one transaction
  per batch, one push per session per batch), in the order the events were emitted.

What a crash can lose: events still in the writer's queue when the process is killed. The
writer starts a batch the moment one event is queued, so that window is one insert long
(milliseconds); rows already committed are never lost or duplicated, and sequence numbers are
assigned only inside the committing transaction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import close_old_connections, connection, transaction
from django.db.utils import DatabaseError, InterfaceError, OperationalError
from django.utils import timezone

from labs import broadcast
from labs.engine import is_fast_fail
from labs.models import JournalEvent, LabSession

logger = logging.getLogger(__name__)

#: Kinds the Django side adds to the engine's own (labs.engine.events.EVENT_KINDS).
#: Kinds that end a burst, however it ended.
BURST_END_KINDS = ("burst_end", "burst_interrupted", "burst_failed")

LAB_EVENT_KINDS = (
    "dependency_set",
    "policy_set",
    "fault_injected",
    "fault_restored",
    "breaker_forced",
    "session_reset",
    "state_restored",
    "burst_queued",
    "burst_interrupted",
    "burst_failed",
    "scenario_assigned",
)


@dataclass(slots=True)
class Entry:
    """One journal row waiting for its sequence number."""

    session_id: int
    classroom_id: int
    kind: str
    message: str
    burst_id: int | None = None
    t_ms: float = 0.0
    call_no: int | None = None
    attempt_no: int | None = None
    outcome: str = ""
    error: str = ""
    latency_ms: float | None = None
    backoff_ms: float | None = None
    state_from: str = ""
    state_to: str = ""
    actor_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    # Wall time when the event was handed over (push latency is measured from here).
    emitted: float = 0.0


def entry_from_event(event, *, session_id: int, classroom_id: int, burst_id: int | None) -> Entry:
    """Adapt an engine :class:`~labs.engine.events.Event` to a journal :class:`Entry`."""
    data = dict(event.data) if event.data else {}
    if event.reason:
        data.setdefault("reason", event.reason)
    return Entry(
        session_id=session_id,
        classroom_id=classroom_id,
        kind=event.kind,
        message=event.explain,
        burst_id=burst_id,
        t_ms=event.at_ms,
        call_no=event.call,
        attempt_no=event.attempt,
        outcome=event.outcome or "",
        error=event.error or "",
        latency_ms=event.latency_ms,
        backoff_ms=event.backoff_ms,
        state_from=event.state_from or "",
        state_to=event.state_to or "",
        data=data,
        emitted=time.time(),
    )


def _payload(fields, seq: int, created_at: datetime, emitted: float | None) -> dict[str, Any]:
    """The JSON form of one journal row, from a row or an entry (same attribute names)."""
    payload = {
        "seq": seq,
        "kind": fields.kind,
        "burst": fields.burst_id,
        "t_ms": fields.t_ms,
        "at": created_at.isoformat(),
        "call": fields.call_no,
        "attempt": fields.attempt_no,
        "outcome": fields.outcome,
        "error": fields.error,
        "latency_ms": fields.latency_ms,
        "backoff_ms": fields.backoff_ms,
        "state_from": fields.state_from,
        "state_to": fields.state_to,
        "actor": fields.actor_id,
        "message": fields.message,
        "data": fields.data,
    }
    if emitted:
        payload["emitted"] = emitted
    return payload


def event_payload(row: JournalEvent, emitted: float | None = None) -> dict[str, Any]:
    """The JSON form of a journal row, as pushed to pages and exported."""
    return _payload(row, row.seq, row.created_at, emitted)


class Written(NamedTuple):
    """An entry as committed: its sequence number and the row's ``created_at``."""

    entry: Entry
    seq: int
    created_at: datetime


def entry_payload(written: Written) -> dict[str, Any]:
    """:func:`event_payload` for a just-written entry (no model instance needed)."""
    return _payload(written.entry, written.seq, written.created_at, written.entry.emitted)


_COLUMNS = (
    "session_id", "seq", "burst_id", "kind", "created_at", "t_ms", "call_no", "attempt_no",
    "outcome", "error", "latency_ms", "backoff_ms", "state_from", "state_to", "actor_id",
    "message", "data",
)  # fmt: skip


def append_entries(entries: Sequence[Entry]) -> list[Written]:
    """Assign sequence numbers and insert ``entries``, keeping their order per session.

    Must run inside a transaction. Per session, one ``UPDATE ... RETURNING`` reserves a block
    of sequence numbers and holds the session's row lock until commit (sessions are taken in
    id order, so two writers never wait on each other in a cycle); then one ``executemany``
    inserts every row. Plain SQL rather than ``bulk_create``: building model instances cost
    about ten times more than the INSERT itself, on the path every burst event takes.
    Returns the written entries in input order. Raises LabSession.DoesNotExist if a session
    is gone.
    """
    per_session: dict[int, list[Entry]] = defaultdict(list)
    for entry in entries:
        per_session[entry.session_id].append(entry)
    now = timezone.now()
    session_table = connection.ops.quote_name(LabSession._meta.db_table)
    seqs: dict[int, int] = {}
    params: list[tuple[Any, ...]] = []
    created = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        for session_id in sorted(per_session):
            batch = per_session[session_id]
            cursor.execute(
                f"UPDATE {session_table} SET next_seq = next_seq + %s WHERE id = %s "  # noqa: S608
                "RETURNING next_seq",
                [len(batch), session_id],
            )
            row = cursor.fetchone()
            if row is None:
                raise LabSession.DoesNotExist(f"lab session {session_id} is gone")
            first = row[0] - len(batch)
            for offset, entry in enumerate(batch):
                seqs[id(entry)] = first + offset
        for entry in entries:
            params.append((
                entry.session_id, seqs[id(entry)], entry.burst_id, entry.kind, created,
                entry.t_ms, entry.call_no, entry.attempt_no, entry.outcome, entry.error,
                entry.latency_ms, entry.backoff_ms, entry.state_from, entry.state_to,
                entry.actor_id, entry.message, json.dumps(entry.data, separators=(",", ":")),
            ))  # fmt: skip
        table = connection.ops.quote_name(JournalEvent._meta.db_table)
        columns = ", ".join(_COLUMNS)
        if connection.vendor == "postgresql":
            # COPY: executemany costs a round trip per row there, and one huge multi-row
            # INSERT costs psycopg more to parse than to send (900 rows: ~200 ms either way).
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in params:
                    copy.write_row(row)
        else:
            placeholders = ", ".join(["%s"] * len(_COLUMNS))
            cursor.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({placeholders})",  # noqa: S608
                params,
            )
    return [Written(entry, seqs[id(entry)], now) for entry in entries]


def pushes_for(written: Iterable[Written]) -> list[broadcast.Push]:
    """The channel-layer messages announcing freshly committed rows (one per session)."""
    per_session: dict[int, list[Written]] = defaultdict(list)
    for item in written:
        per_session[item.entry.session_id].append(item)
    pushes: list[broadcast.Push] = []
    for session_id, items in per_session.items():
        payloads = [entry_payload(item) for item in items]
        pushes.extend(
            broadcast.journal_pushes(
                session_id, items[0].entry.classroom_id, payloads, class_summary(payloads)
            )
        )
    return pushes


def class_summary(payloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a class dashboard needs from a batch of one session's events: deltas, not rows."""
    summary: dict[str, Any] = {
        "last_seq": payloads[-1]["seq"] if payloads else None,
        "calls": 0,
        "attempts": 0,
        "fast_fails": 0,
        "successes": 0,
    }
    for p in payloads:
        kind = p["kind"]
        if kind == "attempt":
            summary["attempts"] += 1
        elif kind == "call_result":
            summary["calls"] += 1
            if p["outcome"] == "success":
                summary["successes"] += 1
            elif is_fast_fail(p["outcome"]):
                summary["fast_fails"] += 1
        if p["state_to"]:
            summary["state"] = p["state_to"]
        if kind == "burst_start":
            summary["activity"] = "bursting"
        elif kind in BURST_END_KINDS:
            summary["activity"] = "idle"
            if kind == "burst_end":
                summary["burst_summary"] = p["data"]  # a burst_end's data is its summary
        elif kind in ("dependency_set", "fault_injected", "fault_restored", "session_reset"):
            mode = p["data"].get("mode")
            if mode:
                summary["mode"] = mode
    return summary


def record(entries: Sequence[Entry]) -> list[Written]:
    """Journal ``entries`` from request code: rows now, pushes after the commit.

    Call it inside the service's ``transaction.atomic()`` so the rows commit or roll back with
    the change they describe.
    """
    if not entries:
        return []
    with transaction.atomic():
        written = append_entries(entries)
        pushes = pushes_for(written)
        transaction.on_commit(lambda: broadcast.send_all(pushes))
    return written


# --- The writer ---------------------------------------------------------------------------


#: SQLite's write lock: its own busy handler sleeps 1, 2, 5, 10 ... then 100 ms at a time
#: between tries, so a writer queued behind a flurry of short transactions (thirty students
#: pressing Run burst at once, the worker claiming their bursts) could sleep through free
#: windows for hundreds of milliseconds while its batch aged. The writer lets SQLite wait
#: ``SQLITE_BUSY_TIMEOUT_MS`` and then asks again itself every ``SQLITE_POLL_INTERVAL``,
#: for up to ``SQLITE_POLL_SECONDS`` (then the slow retry below takes over).
SQLITE_BUSY_TIMEOUT_MS = 2
SQLITE_POLL_INTERVAL = 0.001
SQLITE_POLL_SECONDS = 20.0


def _sqlite_busy(exc: Exception) -> bool:
    return (
        isinstance(exc, OperationalError) and connection.vendor == "sqlite" and "locked" in str(exc)
    )


class _Flush:
    __slots__ = ("callback", "close", "done")

    def __init__(self, close: bool = False) -> None:
        self.done = threading.Event()
        self.close = close
        self.callback: Callable[[], None] | None = None


AfterWrite = Callable[[Sequence[Written]], None]


class JournalWriter:
    """Takes journal entries off a burst's timing path; writes and pushes them in batches.

    ``submit`` is cheap and thread-safe. One daemon thread per writer drains the queue: it
    blocks for the first entry, takes everything else already queued (up to ``max_batch``),
    writes it in one transaction and then pushes it. Order is the order of ``submit`` calls.
    A database error is retried with capped backoff until the batch is written: a burst's
    events are never dropped because the database was briefly locked.

    ``after_write`` (optional) runs in the writer thread inside the batch's transaction, after
    the inserts; the burst runner uses it to store the breaker snapshot when a batch contains a
    transition.
    """

    def __init__(
        self,
        *,
        max_batch: int = 2000,
        linger: float = 0.008,
        after_write: AfterWrite | None = None,
    ) -> None:
        self._queue: queue.SimpleQueue[Entry | _Flush | None] = queue.SimpleQueue()
        self._max_batch = max_batch
        self._linger = linger
        self._after_write = after_write
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.written = 0  # rows written so far (for benchmarks and tests)
        self._sqlite_polling: object | None = None  # the raw connection set up for polling

    def submit(self, entry: Entry) -> None:
        """Queue one entry (never blocks, never touches the database)."""
        if self._thread is None:
            self._start()
        self._queue.put(entry)

    def flush(self, timeout: float = 30.0, *, close_connection: bool = False) -> bool:
        """Wait until everything submitted before this call is committed and pushed.

        With ``close_connection`` the writer thread also closes its database connection (a
        test run does this before dropping its test database).
        """
        if self._thread is None:
            return True
        marker = _Flush(close=close_connection)
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def flush_async(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the writer thread) once everything submitted so far is
        committed and pushed."""
        marker = _Flush()
        marker.callback = callback
        if self._thread is None:
            self._start()
        self._queue.put(marker)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        while True:
            first = self._queue.get()
            batch: list[Entry] = []
            flushes: list[_Flush] = []
            item: Entry | _Flush | None = first
            # Linger a few milliseconds after the first entry: one transaction and one push
            # for everything a burst emits meanwhile. Every batch costs the interpreter (the
            # GIL) time that bursts in this process would otherwise wait for when they wake
            # from a sleep, so fewer, larger batches keep their timings honest. A flush
            # request ends the linger at once.
            until = time.monotonic() + self._linger
            while True:
                if isinstance(item, _Flush):
                    flushes.append(item)
                elif item is not None:
                    batch.append(item)
                if len(batch) >= self._max_batch:
                    break
                try:
                    if flushes:
                        item = self._queue.get_nowait()
                    else:
                        wait = until - time.monotonic()
                        item = (
                            self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                        )
                except queue.Empty:
                    break
            if batch:
                try:
                    self._write(batch)
                except Exception:  # never let the thread die: later batches must still land
                    logger.exception("journal batch of %d lost", len(batch))
            for marker in flushes:
                if marker.close:
                    connection.close()
                marker.done.set()
                if marker.callback is not None:
                    marker.callback()

    def _write(self, batch: list[Entry]) -> None:
        delay = 0.02
        polling_until = time.monotonic() + SQLITE_POLL_SECONDS
        while True:
            try:
                close_old_connections()
                self._poll_sqlite_lock()
                with transaction.atomic():
                    written = append_entries(batch)
                    if self._after_write is not None:
                        self._after_write(written)
                break
            except LabSession.DoesNotExist:
                # The session was deleted mid-burst (an admin cleaning up): nothing to keep.
                written = self._write_surviving(batch)
                break
            except (OperationalError, InterfaceError, DatabaseError) as exc:
                if _sqlite_busy(exc) and time.monotonic() < polling_until:
                    time.sleep(SQLITE_POLL_INTERVAL)  # another writer holds the lock: ask again
                    continue
                logger.warning(
                    "journal batch of %d not written yet (%s); retrying", len(batch), exc
                )
                connection.close()
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.written += len(written)
        pushes = pushes_for(written)
        if pushes and self._loop is not None:
            try:
                self._loop.run_until_complete(broadcast.asend_all(pushes))
            except Exception:  # a push is best effort: pages catch up from the journal
                logger.exception("journal push failed")

    def _poll_sqlite_lock(self) -> None:
        """On SQLite, make this connection's busy handler give up after a millisecond or two,
        so that ``_write`` polls for the write lock itself (see SQLITE_POLL_INTERVAL)."""
        if connection.vendor != "sqlite":
            return
        connection.ensure_connection()
        raw = connection.connection
        if self._sqlite_polling is not raw:
            raw.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            self._sqlite_polling = raw

    def _write_surviving(self, batch: list[Entry]) -> list[Written]:
        alive = set(
            LabSession.objects.filter(pk__in={e.session_id for e in batch}).values_list(
                "pk", flat=True
            )
        )
        kept = [e for e in batch if e.session_id in alive]
        if not kept:
            return []
        with transaction.atomic():
            return append_entries(kept)


_writer: JournalWriter | None = None
_writer_lock = threading.Lock()


def get_writer() -> JournalWriter:
    """This process's writer: in a process of its own when ``LAB_JOURNAL_WRITER`` is
    "process" (the default on workers: see labs.journal_process), else a thread."""
    global _writer
    if _writer is None:
        with _writer_lock:
            if _writer is None:
                from django.conf import settings

                if settings.LAB_JOURNAL_WRITER == "process":
                    from labs.journal_process import JournalPipe

                    _writer = JournalPipe()  # type: ignore[assignment]
                else:
                    from labs.runtime import store_snapshots_after_write

                    _writer = JournalWriter(after_write=store_snapshots_after_write)
    return _writer


def set_writer(writer: JournalWriter | None) -> JournalWriter | None:
    """Replace this process's writer (benchmarks compare the two kinds); returns the old one."""
    global _writer
    with _writer_lock:
        old, _writer = _writer, writer
    return old
