"""This process's journal writer: a process of its own on workers, else a thread.

The choice is ``LAB_JOURNAL_WRITER`` ("process", the default, or "thread"); both
implement :class:`labs.journal.store.JournalSink`, so a burst does not care which it has.
:mod:`labs.live.writer_process` says why workers write from another process.
"""

from __future__ import annotations

import threading

from django.conf import settings

from labs.journal.store import JournalSink
from labs.live.runtime import store_snapshots_after_write
from labs.live.writer import JournalWriter
from labs.live.writer_process import JournalPipe

_writer: JournalSink | None = None
_writer_lock = threading.Lock()


def get_writer() -> JournalSink:
    """This process's writer, created on first use."""
    global _writer
    if _writer is None:
        with _writer_lock:
            if _writer is None:
                if settings.LAB_JOURNAL_WRITER == "process":
                    _writer = JournalPipe()
                else:
                    _writer = JournalWriter(after_write=store_snapshots_after_write)
    return _writer
