"""The journal writer thread: takes a run's journal entries off its timing path.

The engine's sink only appends an entry to an in-memory queue; the writer drains it in
batches (one transaction a batch, one push per session a batch), in emission order. On a
worker it runs inside the writer process (:mod:`labs.worker.writer_process`). What a crash can
lose and why nothing is written twice: docs/scaling.md, "The journal writer thread".
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from django.db import close_old_connections, connection, transaction
from django.db.utils import DatabaseError, InterfaceError, OperationalError

from labs.journal import broadcast, seconds
from labs.journal.store import Entry, Written, append_entries, pushes_for, tally_pushes
from labs.live import metrics
from labs.models import JournalEvent, LabSession

logger = logging.getLogger(__name__)

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

#: One row of a batch that identifies the batch's commit: (session id, seq, created_at). All
#: rows of a batch commit together, and no other transaction writes a row with this session,
#: this sequence number and this timestamp, so the row is there exactly when the batch is.
Witness = tuple[int, int, datetime]
Prepared = Callable[[list[Entry], Witness], None]
Done = Callable[[list[Entry]], None]

LOST_KIND = "journal_lost"

#: How long a batch of steady traffic's rows (no burst's among them) waits for more rows
#: before it is written: see JournalWriter._run.
TRAFFIC_LINGER_S = 0.05
#: Steady traffic's rows are pushed as seconds (labs.journal.seconds), once a second, this
#: long after the second's end: the rows of the second just ended have been written by then
#: (they wait TRAFFIC_LINGER_S at most), so a page mostly gets each second complete at once.
SECONDS_AFTER_S = 0.2


def witness_committed(witness: Witness) -> bool:
    """Whether the batch that ``witness`` identifies is committed.

    Takes the session's row lock first (PostgreSQL): a transaction of a writer that was killed
    mid-COMMIT still holds it until the server has committed or rolled it back, so the answer
    is final. SQLite rolls a dead writer's unfinished transaction back when the file is opened.
    """
    session_id, seq, created_at = witness
    with transaction.atomic():
        list(LabSession.objects.select_for_update().filter(pk=session_id).values_list("pk"))
        return JournalEvent.objects.filter(
            session_id=session_id, seq=seq, created_at=created_at
        ).exists()


def loss_entries(entries: Sequence[Entry], reason: str) -> list[Entry]:
    """One ``journal_lost`` entry per session and burst, counting ``entries`` that were lost."""
    counts: Counter[tuple[int, int, int | None]] = Counter(
        (e.session_id, e.classroom_id, e.burst_id) for e in entries
    )
    return [
        Entry(
            session_id=session_id,
            classroom_id=classroom_id,
            burst_id=burst_id,
            kind=LOST_KIND,
            message=f"{count} journal event{'s' if count != 1 else ''} lost ({reason})",
            data={"lost": count, "reason": reason},
            emitted=time.time(),
        )
        for (session_id, classroom_id, burst_id), count in counts.items()
    ]


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

    ``on_prepared(batch, witness)`` (optional) runs just before the batch's COMMIT and
    ``on_done(batch)`` once the batch is committed and pushed (or dropped because its sessions
    are gone, or given up with a ``journal_lost`` row); the writer process reports both to its
    parent, which keeps every entry until it is done.
    """

    def __init__(
        self,
        *,
        max_batch: int = 2000,
        linger: float = 0.008,
        traffic_linger: float = TRAFFIC_LINGER_S,
        after_write: AfterWrite | None = None,
        on_prepared: Prepared | None = None,
        on_done: Done | None = None,
    ) -> None:
        self._queue: queue.SimpleQueue[Entry | list[Entry] | _Flush | None] = queue.SimpleQueue()
        self._max_batch = max_batch
        self._linger = linger
        self._traffic_linger = max(linger, traffic_linger)
        self._after_write = after_write
        self._on_prepared = on_prepared
        self._on_done = on_done
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.written = 0  # rows written so far (for benchmarks and tests)
        # Steady traffic's committed rows, counted by the second, not yet pushed; pushed at
        # ``_seconds_due`` (monotonic), by this thread only.
        self._tally = seconds.Tally()
        self._seconds_due: float | None = None
        self._sqlite_polling: object | None = None  # the raw connection set up for polling

    def submit(self, entry: Entry) -> None:
        """Queue one entry (never blocks, never touches the database)."""
        if self._thread is None:
            self.start()
        self._queue.put(entry)

    def submit_many(self, entries: Sequence[Entry]) -> None:
        """Queue several entries in order; they land in one batch together."""
        if not entries:
            return
        if self._thread is None:
            self.start()
        self._queue.put(list(entries))

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
            self.start()
        self._queue.put(marker)

    def start(self) -> None:
        """Start the writer thread now (otherwise the first ``submit`` starts it)."""
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self, timeout: float = 30.0) -> None:
        """Write everything queued and close the thread's database connection (a test run
        does this before dropping its test database). The thread stays, idle."""
        self.flush(timeout, close_connection=True)

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._until_seconds())
            except queue.Empty:
                self._push_seconds()
                continue
            batch: list[Entry] = []
            flushes: list[_Flush] = []
            item: Entry | list[Entry] | _Flush | None = first
            # Linger a few milliseconds after the first entry: one transaction and one push
            # for everything a burst emits meanwhile (a batch's own cost is most of what a
            # row costs). A batch of steady traffic's rows alone lingers longer
            # (traffic_linger): its pages draw traffic second by second, and a run of thirty
            # students makes hundreds of rows a second. An entry of a burst, which a student
            # watches attempt by attempt, brings the short linger back; a flush request ends
            # it at once.
            started = time.monotonic()
            until = started + self._traffic_linger
            while True:
                if isinstance(item, _Flush):
                    flushes.append(item)
                elif isinstance(item, list):
                    batch.extend(item)
                    if until > started + self._linger and any(e.burst_id is not None for e in item):
                        until = started + self._linger
                elif item is not None:
                    batch.append(item)
                    if item.burst_id is not None:
                        until = min(until, started + self._linger)
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
                except Exception as exc:  # never let the thread die: later batches must land
                    logger.exception("journal batch of %d lost", len(batch))
                    self._journal_loss(batch, exc)
                if self._on_done is not None:
                    self._on_done(batch)
            if flushes or (self._seconds_due is not None and time.monotonic() >= self._seconds_due):
                # A flush means committed and pushed: a run's end waits for its last seconds.
                self._push_seconds()
            for marker in flushes:
                if marker.close:
                    connection.close()
                marker.done.set()
                if marker.callback is not None:
                    marker.callback()

    def _write(self, batch: list[Entry]) -> None:
        delay = 0.02
        polling_until = time.monotonic() + SQLITE_POLL_SECONDS
        in_doubt: list[Written] = []  # what an attempt whose COMMIT failed would have written
        only_alive = False
        while True:
            try:
                close_old_connections()
                if in_doubt and witness_committed(_witness(in_doubt)):
                    written = in_doubt  # the COMMIT went through after all
                    break
                in_doubt = []
                self._poll_sqlite_lock()
                with transaction.atomic():
                    written = self._surviving(batch) if only_alive else append_entries(batch)
                    if self._after_write is not None:
                        self._after_write(written)
                    if written:
                        in_doubt = written
                        if self._on_prepared is not None:
                            self._on_prepared(batch, _witness(written))
                break
            except LabSession.DoesNotExist:
                # A session was deleted mid-burst (an admin cleaning up): write the entries of
                # the sessions that are left.
                only_alive = True
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
        metrics.journal_committed(written)
        # Steady traffic's rows are counted by the second and pushed once a second
        # (_push_seconds); every other row now, after its session's seconds so far.
        rows = []
        for item in written:
            entry = item.entry
            if seconds.per_second(entry.kind, entry.burst_id):
                self._tally.add(entry.session_id, entry.classroom_id, item.seq, entry)
            else:
                rows.append(item)
        if self._tally and self._seconds_due is None:
            self._seconds_due = _next_second_push()
        pushes = pushes_for(rows, self._tally) if rows else []
        if pushes:
            # One pipelined round trip on a plain client: no event loop per batch, which
            # costs the writer process a large share of its CPU. A failed send is logged
            # inside; pages catch up from the journal.
            broadcast.send_all(pushes)
            metrics.journal_pushed(rows)

    def _until_seconds(self) -> float | None:
        """How long the thread may wait for entries before the seconds are due (None: no
        seconds waiting)."""
        if self._seconds_due is None:
            return None
        return max(0.0, self._seconds_due - time.monotonic())

    def _push_seconds(self) -> None:
        """Push the seconds of steady traffic counted since the last time: per session one
        message (more only when other rows fall between its rows), per class one."""
        self._seconds_due = None
        if not self._tally:
            return
        broadcast.send_all(tally_pushes(self._tally))

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

    def _surviving(self, batch: list[Entry]) -> list[Written]:
        """Append the entries of ``batch`` whose sessions still exist."""
        alive = set(
            LabSession.objects.filter(pk__in={e.session_id for e in batch}).values_list(
                "pk", flat=True
            )
        )
        kept = [e for e in batch if e.session_id in alive]
        return append_entries(kept) if kept else []

    def _journal_loss(self, batch: list[Entry], exc: Exception) -> None:
        """Leave a row per session saying how many of its events a failed batch held."""
        try:
            with transaction.atomic():
                self.written += len(append_entries(loss_entries(batch, type(exc).__name__)))
        except Exception:
            logger.exception("could not journal the loss of %d events", len(batch))


def _next_second_push() -> float:
    """When (monotonic) the seconds counted now are pushed: ``SECONDS_AFTER_S`` after the end
    of the current wall-clock second."""
    now = time.time()
    return time.monotonic() + (1.0 - now % 1.0) + SECONDS_AFTER_S


def _witness(written: Sequence[Written]) -> Witness:
    last = written[-1]
    return (last.entry.session_id, last.seq, last.created_at)
