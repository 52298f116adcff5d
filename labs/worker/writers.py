"""This process's journal writer: a process of its own on workers, else a thread.

The choice is ``LAB_JOURNAL_WRITER`` ("process", the default, or "thread"); both
implement :class:`labs.journal.store.JournalSink`, so a burst does not care which it has.
:mod:`labs.worker.writer_process` says why workers write from another process.
"""

from __future__ import annotations

from django.conf import settings

from labs.journal.store import JournalSink
from labs.live.runtime import store_snapshots_after_write
from labs.worker.once import once
from labs.worker.writer import JournalWriter
from labs.worker.writer_process import JournalPipe


@once
def get_writer() -> JournalSink:
    """This process's writer, created on first use."""
    if settings.LAB_JOURNAL_WRITER == "process":
        return JournalPipe()
    return JournalWriter(after_write=store_snapshots_after_write)
