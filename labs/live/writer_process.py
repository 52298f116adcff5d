"""The journal writer in a process of its own, next to a Celery worker.

Why a process and not a thread: a burst's timings are real sleeps, and a thread that wakes
from a sleep needs the interpreter lock back. A writer thread in the same interpreter turning
events into INSERTs and channel-layer pushes holds that lock often enough to add milliseconds to
every attempt (benchmarks/burst_bench.py measured it), which is exactly the distortion the lab
must not show students. In its own process the writer uses the other core and the burst thread's
whole cost per event is one pickle and one ``send_bytes`` on a pipe.

Crash behaviour: entries already written to the pipe are not lost when the worker process is
killed; the writer process reads to the end of the pipe, writes everything and exits. Entries
are never written twice: sequence numbers are only assigned in the writer's committing
transaction.

Interface: :class:`JournalPipe` implements :class:`labs.live.journal.JournalSink`, as the
thread writer :class:`labs.live.writer.JournalWriter` does.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_TOKEN = struct.Struct("!Q")
_FLUSH = "flush"
_STOP = "stop"


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


def _child_main() -> None:
    """The writer process: read framed entries on stdin, write them, ack flushes on stdout."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connections

    # The parent may be a test run whose database name was changed at run time.
    database = json.loads(os.environ.get("LAB_JOURNAL_DATABASE", "{}"))
    # One connection for the life of the process: it writes every few milliseconds (on
    # PostgreSQL the pool keeps it). A broken one is closed and reopened by the writer's retry.
    if "pool" not in connections["default"].settings_dict.get("OPTIONS", {}):
        database["CONN_MAX_AGE"] = None
    settings.DATABASES["default"].update(database)
    connections["default"].settings_dict.update(database)

    from labs.live.journal import Entry
    from labs.live.runtime import store_snapshots_after_write
    from labs.live.writer import JournalWriter

    writer = JournalWriter(after_write=store_snapshots_after_write)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    out_lock = threading.Lock()

    def ack(token: int) -> None:
        with out_lock:
            stdout.write(_TOKEN.pack(token))
            stdout.flush()

    while True:
        frame = _read_frame(stdin)
        if frame is None:
            break  # the parent is gone: write what we have, then leave
        item = pickle.loads(frame)  # noqa: S301 - framed by our own parent process
        if isinstance(item, Entry):
            writer.submit(item)
        elif item[0] == _FLUSH:
            writer.flush_async(lambda token=item[1]: ack(token))
        elif item[0] == _STOP:
            break
    writer.flush(close_connection=True)


class JournalPipe:
    """Hands entries to a writer process (started on first use, restarted if it died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._tokens = itertools.count(1)
        self._acks: dict[int, threading.Event] = {}

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
            [sys.executable, "-m", "labs.live.writer_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._process = process
        threading.Thread(target=self._read_acks, args=(process,), daemon=True).start()

    def _read_acks(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        while True:
            data = process.stdout.read(_TOKEN.size)
            if len(data) < _TOKEN.size:
                return
            (token,) = _TOKEN.unpack(data)
            event = self._acks.pop(token, None)
            if event is not None:
                event.set()

    def start(self) -> None:
        """Start the writer process now (a worker does it when it starts, so the first
        burst does not wait for Django to boot in the child)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()

    def _send(self, payload: bytes) -> None:
        frame = _HEADER.pack(len(payload)) + payload
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                if self._process is not None:
                    logger.error("journal writer process died (exit %s); restarting it",
                                 self._process.returncode)  # fmt: skip
                self._start()
            assert self._process is not None and self._process.stdin is not None
            self._process.stdin.write(frame)

    def submit(self, entry) -> None:
        """Queue one entry for the writer process (a pickle and a pipe write)."""
        self._send(pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))

    def flush(self, timeout: float = 30.0, *, close_connection: bool = False) -> bool:
        """Wait until every entry submitted before this call is committed and pushed."""
        if self._process is None:
            return True
        token = next(self._tokens)
        done = threading.Event()
        self._acks[token] = done
        self._send(pickle.dumps((_FLUSH, token)))
        return done.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Write everything queued, then end the writer process."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            assert process.stdin is not None
            payload = pickle.dumps((_STOP, 0))
            process.stdin.write(_HEADER.pack(len(payload)) + payload)
            process.stdin.close()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    _child_main()
