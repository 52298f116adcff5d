"""The journal writer thread: takes a burst's journal entries off its timing path.

The engine's sink only appends an entry to an in-memory queue (about a microsecond), so
journaling never sits on the clock path of a burst: the timings a student sees are the
configured latencies and backoffs, not our inserts. The writer thread drains the queue in
batches (one transaction per batch, one push per session per batch), in the order the events
were emitted. On a worker this thread runs inside the writer process
(:mod:`labs.live.writer_process`); elsewhere (tests, ``LAB_JOURNAL_WRITER=thread``) in the
process itself. :func:`labs.live.writers.get_writer` chooses.

What a crash can lose: events still in the writer's queue when the process is killed. The
writer starts a batch the moment one event is queued, so that window is one insert long;
rows already committed are never lost or duplicated, and sequence numbers are assigned only
inside the committing transaction.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from django.db import close_old_connections, connection, transaction
from django.db.utils import DatabaseError, InterfaceError, OperationalError

from labs.live import broadcast, metrics
from labs.live.journal import Entry, Written, append_entries, pushes_for
from labs.models import LabSession

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
            self.start()
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
        metrics.journal_committed(written)
        pushes = pushes_for(written)
        if pushes and self._loop is not None:
            try:
                self._loop.run_until_complete(broadcast.asend_all(pushes))
                metrics.journal_pushed(written)
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
