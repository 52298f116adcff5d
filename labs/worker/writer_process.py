"""The journal writer in a process of its own, next to a Celery worker, so that turning events
into INSERTs and pushes never takes the interpreter lock from the runs' timed sleeps.

:class:`JournalPipe` implements :class:`labs.journal.store.JournalSink`; a write on the pipe
never raises into a run. How the parent keeps what the writer has not committed, restarts a
dead writer and stops it: docs/scaling.md, "The journal writer process".
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import logging
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")  # child -> parent: payload size
_FRAME = struct.Struct("!IQ")  # parent -> child: payload size, id
_FLUSH = "flush"
_STOP = "stop"
_RESUME = "resume"
_PREPARED = "prepared"
_DONE = "done"

#: Entries and flush requests the parent keeps until the writer process reports them done.
MAX_UNACKED = 100_000


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    return _read_exact(stream, _HEADER.unpack(header)[0])


def _child_main() -> None:
    """The writer process: read framed entries on stdin, write them, report on stdout."""
    # Ended by its parent, not by the signals its process group gets (module docstring).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    frames: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()

    def pump() -> None:
        # Drain the pipe from the first moment, while Django boots: a parent resending its
        # buffer to this process must not block on a full pipe meanwhile.
        while True:
            header = _read_exact(stdin, _FRAME.size)
            if header is None:
                break
            size, emit_id = _FRAME.unpack(header)
            payload = _read_exact(stdin, size)
            if payload is None:
                break
            frames.put((emit_id, payload))
        frames.put(None)

    threading.Thread(target=pump, name="journal-pipe-reader", daemon=True).start()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection, connections

    # The parent may be a test run whose database name was changed at run time.
    database = json.loads(os.environ.get("LAB_JOURNAL_DATABASE", "{}"))
    # One connection for the life of the process: it writes every few milliseconds (on
    # PostgreSQL the pool keeps it). A broken one is closed and reopened by the writer's retry.
    if "pool" not in connections["default"].settings_dict.get("OPTIONS", {}):
        database["CONN_MAX_AGE"] = None
    settings.DATABASES["default"].update(database)
    connections["default"].settings_dict.update(database)

    from labs.journal.store import Entry
    from labs.live.runtime import store_snapshots_after_write
    from labs.worker.writer import JournalWriter, witness_committed

    out_lock = threading.Lock()

    def report(*message) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with out_lock:
                stdout.write(_HEADER.pack(len(payload)) + payload)
                stdout.flush()
        except OSError:
            pass  # the parent is gone: nobody to tell, the rows are written all the same

    # Ids of the entries handed to the writer, in order: its batches take them in this order.
    ids: collections.deque[int] = collections.deque()

    def prepared(batch, witness) -> None:
        report(_PREPARED, ids[len(batch) - 1], witness)

    def done(batch) -> None:
        for _ in range(len(batch) - 1):
            ids.popleft()
        report(_DONE, ids.popleft())

    writer = JournalWriter(
        after_write=store_snapshots_after_write, on_prepared=prepared, on_done=done
    )
    _connect_early()
    # The boot's objects out of the collector's reach (as the worker does, lab_project/
    # celery.py): a full collection no longer holds a batch for a few hundred milliseconds.
    gc.collect()
    gc.freeze()
    skip_through = 0  # ids a dead predecessor had committed (see _RESUME)
    while True:
        frame = frames.get()
        if frame is None:
            break  # the parent is gone: write what we have, then leave
        emit_id, payload = frame
        item = pickle.loads(payload)  # noqa: S301 - framed by our own parent process
        if emit_id and emit_id <= skip_through:
            continue
        if isinstance(item, Entry):
            ids.append(emit_id)
            writer.submit(item)
        elif isinstance(item, list):
            # A frame of several entries (``submit_many``): they go into one batch together,
            # so a batch always ends with a frame's last entry, the one carrying its id.
            ids.extend([0] * (len(item) - 1))
            ids.append(emit_id)
            writer.submit_many(item)
        elif item[0] == _FLUSH:
            writer.flush_async(lambda emit_id=emit_id: report(_DONE, emit_id))
        elif item[0] == _RESUME:
            # Our predecessor died after preparing the batch ending at ``through``: if it had
            # committed it, those entries are resent to us but must not be written again.
            through, witness = item[1], item[2]
            if _committed(witness_committed, witness):
                skip_through = through
                report(_DONE, through)
            connection.close()
        elif item[0] == _STOP:
            break
    writer.flush(close_connection=True)
    # Leave without the interpreter's shutdown: the pipe reader thread may be blocked in a
    # read of stdin, and finalizing the interpreter under it aborts the process ("could not
    # acquire lock for <stdin> at interpreter shutdown"). Everything is written and reported.
    os._exit(0)


def _connect_early() -> None:
    """Open the database connection and the Redis connections the first batch needs (the
    channel layer's pushes, the engine store's snapshots) while nothing waits: the first
    burst after a worker starts should not pay for them. A server that is not there yet is
    not an error here; the batch that needs it retries."""
    from channels.layers import get_channel_layer
    from django.db import connection

    from labs.live import runtime

    for step in (connection.ensure_connection, runtime.engine_redis().ping,
                 get_channel_layer().connect_sync):  # fmt: skip
        try:
            step()
        except Exception as exc:
            logger.warning("journal writer: could not connect early (%r)", exc)


def _committed(witness_committed, witness) -> bool:
    """``witness_committed(witness)``, asked again while the database is unreachable."""
    from django.db import DatabaseError, connection

    delay = 0.05
    while True:
        try:
            return witness_committed(witness)
        except DatabaseError as exc:
            logger.warning("cannot look up the last prepared journal batch yet (%s)", exc)
            connection.close()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


class JournalPipe:
    """Hands entries to a writer process (started on first use, restarted when it dies).

    Keeps every entry until the writer process reports it committed (at most
    ``max_unacked``), and hands what is left to the next writer process when one dies.
    """

    def __init__(self, max_unacked: int = MAX_UNACKED) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._last_id = 0
        self._acked = 0
        self._max_unacked = max_unacked
        # (id, frame, entry or None for a flush), oldest first; pruned as the writer reports.
        self._unacked: collections.deque[tuple[int, bytes, object]] = collections.deque()
        self._evicted: list[tuple[int, object]] = []  # pushed out of a full buffer, not done
        self._prepared: tuple[int, object] | None = None  # (last id, witness) of a batch
        self._flushes: collections.deque[tuple[int, threading.Event]] = collections.deque()

    # --- the writer process -----------------------------------------------------------------

    def _start(self) -> None:
        from django.db import connection

        database = {
            key: str(connection.settings_dict[key])
            if key == "NAME"
            else connection.settings_dict[key]
            for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")
            if key in connection.settings_dict
        }
        env = dict(os.environ)
        env["LAB_JOURNAL_DATABASE"] = json.dumps(database)
        env.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
        process = subprocess.Popen(
            [sys.executable, "-m", "labs.worker.writer_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._process = process
        threading.Thread(
            target=self._read_reports, args=(process,), name="journal-pipe-acks", daemon=True
        ).start()

    def _restart_locked(self) -> None:
        """Start a writer process and hand it everything not done yet (caller holds the lock)."""
        self._process = None
        self._start()
        frames: list[bytes] = []
        if self._prepared is not None and self._prepared[0] > self._acked:
            payload = pickle.dumps((_RESUME, *self._prepared), protocol=pickle.HIGHEST_PROTOCOL)
            frames.append(_FRAME.pack(len(payload), 0) + payload)
        # ``_prepared`` stays until a report settles it (the batch done, or a later batch
        # prepared): a new process that dies before it has looked the batch up hands the
        # question on to the one after it.
        frames.extend(frame for _, frame, _ in self._unacked)
        if self._evicted:
            from labs.worker.writer import loss_entries

            lost = [
                entry
                for _, item in self._evicted
                for entry in (item if isinstance(item, list) else [item])
            ]
            self._evicted.clear()
            logger.error("journal writer process died with %d entries lost", len(lost))
            for entry in loss_entries(lost, "the journal writer died with them"):
                frames.append(
                    self._frame_locked(pickle.dumps(entry, pickle.HIGHEST_PROTOCOL), entry)
                )
        if frames:
            self._write_locked(b"".join(frames))

    def _read_reports(self, process: subprocess.Popen) -> None:
        """Take the writer process's reports until its stdout closes; then, unless it was
        stopped on purpose, start another and hand it what is not done yet."""
        assert process.stdout is not None
        while (frame := _read_frame(process.stdout)) is not None:
            message = pickle.loads(frame)  # noqa: S301 - our own child process
            if message[0] == _DONE:
                self._done_through(message[1])
            elif message[0] == _PREPARED:
                with self._lock:
                    if message[1] > self._acked:
                        self._prepared = (message[1], message[2])
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        with self._lock:
            if self._process is not process:
                return  # stopped on purpose, or already replaced
            logger.error("journal writer process died (exit %s); restarting it with %d "
                         "entries not yet done", process.returncode, len(self._unacked))  # fmt: skip
            try:
                self._restart_locked()
            except Exception:  # the next submit tries again
                logger.exception("could not restart the journal writer process")
                self._process = None

    def _done_through(self, emit_id: int) -> None:
        with self._lock:
            if emit_id <= self._acked:
                return
            self._acked = emit_id
            unacked = self._unacked
            while unacked and unacked[0][0] <= emit_id:
                unacked.popleft()
            if self._evicted:
                self._evicted = [(i, e) for i, e in self._evicted if i > emit_id]
            if self._prepared is not None and self._prepared[0] <= emit_id:
                self._prepared = None
            flushes = self._flushes
            while flushes and flushes[0][0] <= emit_id:
                flushes.popleft()[1].set()

    # --- the burst's side ---------------------------------------------------------------------

    def _frame_locked(self, payload: bytes, entry: object) -> bytes:
        """Give ``payload`` the next id and keep it until it is done (caller holds the lock)."""
        self._last_id += 1
        frame = _FRAME.pack(len(payload), self._last_id) + payload
        self._unacked.append((self._last_id, frame, entry))
        if len(self._unacked) > self._max_unacked:
            emit_id, _, old = self._unacked.popleft()
            if old is not None:
                self._evicted.append((emit_id, old))
        return frame

    def _write_locked(self, data: bytes) -> None:
        process = self._process
        if process is None:
            try:
                self._restart_locked()  # hands over the buffer, ``data`` included
            except Exception:
                logger.exception("could not start the journal writer process")
                self._process = None
            return
        # A broken pipe means the writer process died: its report reader restarts it and hands
        # the new one the buffer, ``data`` included.
        with contextlib.suppress(OSError):
            process.stdin.write(data)  # type: ignore[union-attr]

    def start(self) -> None:
        """Start the writer process now (a worker does it when it starts, so the first
        burst does not wait for Django to boot in the child)."""
        with self._lock:
            if self._process is None:
                self._restart_locked()

    def submit(self, entry) -> None:
        """Queue one entry for the writer process (a pickle and a pipe write)."""
        payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._write_locked(self._frame_locked(payload, entry))

    def submit_many(self, entries: list) -> None:
        """Queue several entries in order, as one frame (one pickle and one pipe write for
        all of them: the engine hub hands over a round's entries this way)."""
        if not entries:
            return
        payload = pickle.dumps(list(entries), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._write_locked(self._frame_locked(payload, list(entries)))

    def flush(self, timeout: float = 30.0, *, close_connection: bool = False) -> bool:
        """Wait until every entry submitted before this call is committed and pushed."""
        if self._process is None and not self._unacked:
            return True
        done = threading.Event()
        payload = pickle.dumps((_FLUSH,))
        with self._lock:
            frame = self._frame_locked(payload, None)
            self._flushes.append((self._last_id, done))
            self._write_locked(frame)
        return done.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Write everything queued, then end the writer process."""
        if not self.flush(timeout):
            logger.error("journal writer process stopped with %d entries not done",
                         len(self._unacked))  # fmt: skip
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            assert process.stdin is not None
            payload = pickle.dumps((_STOP,))
            try:
                process.stdin.write(_FRAME.pack(len(payload), 0) + payload)
                process.stdin.close()
            except OSError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    _child_main()
