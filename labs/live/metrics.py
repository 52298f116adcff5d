"""Prometheus metrics of the lab, correct across its processes.

Every lab process counts into files of its own in ``settings.LAB_METRICS_DIR``
(prometheus_client's multiprocess mode); :func:`exposition` adds them up for ``/metrics``.
Engine counts come from the journal entries a writer has just committed
(:func:`journal_committed`), so they equal what the journal holds; open sockets from the
consumers; breaker states from the sessions' database snapshots at scrape time, right
whichever process changed a breaker. docs/operations.md says what each metric means."""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import time
from collections import Counter as Tally
from collections.abc import Iterable, Sequence

from django.conf import settings
from django.db.models import Count
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from labs.engine.events import is_fast_fail
from labs.models import BreakerState, LabSession

logger = logging.getLogger(__name__)

__all__ = [
    "CONTENT_TYPE_LATEST",
    "BreakerStates",
    "exposition",
    "journal_committed",
    "journal_pushed",
    "mark_process_dead",
    "process_id",
    "socket_closed",
    "socket_opened",
]

_HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"


def process_id() -> str:
    """This process's name in the metrics directory: host and pid (distinct in containers
    that share the directory, where every main process is pid 1)."""
    return f"{_HOST}-{os.getpid()}"


# The directory comes from the settings (loaded first: they export it to the environment);
# the value class names each process's files by process_id.
_DIRECTORY = str(settings.LAB_METRICS_DIR)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", _DIRECTORY)
values.ValueClass = values.MultiProcessValue(process_id)

_NS = "failurelab"
#: Seconds: a batch is usually milliseconds old; a backlog shows up in the upper buckets.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BURST_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)

ATTEMPTS = Counter(
    "attempts", "Attempts made on the dependency, by outcome (ok or error).",
    ["outcome"], namespace=_NS,
)  # fmt: skip
RETRIES = Counter(
    "retries", "Retries scheduled: a failed attempt followed by a backoff sleep.", namespace=_NS
)
CALLS = Counter("calls", "Calls finished, by call outcome.", ["outcome"], namespace=_NS)
FAST_FAILS = Counter(
    "fast_fails", "Calls the breaker refused before any attempt, by outcome.",
    ["outcome"], namespace=_NS,
)  # fmt: skip
GIVE_UPS = Counter(
    "retry_give_ups",
    "Calls that stopped retrying early: retry budget exhausted or deadline exceeded.",
    ["reason"], namespace=_NS,
)  # fmt: skip
TRANSITIONS = Counter(
    "breaker_transitions", "Breaker state changes, by from and to state.",
    ["from_state", "to_state"], namespace=_NS,
)  # fmt: skip
BURST_DURATION = Histogram(
    "burst_duration_seconds", "Wall time of finished bursts, first call to last result.",
    namespace=_NS, buckets=_BURST_BUCKETS,
)  # fmt: skip
JOURNAL_ROWS = Counter(
    "journal_rows", "Journal rows committed by the journal writers.", namespace=_NS
)
BATCH_LAG = Histogram(
    "journal_batch_lag_seconds",
    "Per committed journal batch: from its oldest entry's emission to the commit.",
    namespace=_NS, buckets=_LAG_BUCKETS,
)  # fmt: skip
PUSH_LATENCY = Histogram(
    "push_latency_seconds",
    "Per pushed journal batch: from its oldest entry's emission to the channel-layer send.",
    namespace=_NS, buckets=_LAG_BUCKETS,
)  # fmt: skip
WEBSOCKETS = Gauge(
    "websockets_open", "Live websockets open now, by consumer (lab or dashboard).",
    ["consumer"], namespace=_NS, multiprocess_mode="livesum",
)  # fmt: skip

_GIVE_UP_KINDS = ("budget_exhausted", "deadline_exceeded")


def journal_committed(written: Sequence) -> None:
    """Count a just-committed journal batch (``labs.journal.store.Written`` items) and observe
    its lag. Called by the writer after each commit; never raises into it."""
    if not written:
        return
    try:
        JOURNAL_ROWS.inc(len(written))
        _count(item.entry for item in written)
        _observe_oldest(BATCH_LAG, written)
    except Exception:  # a metric must never cost a journal batch
        logger.exception("journal metrics not counted")


def journal_pushed(written: Sequence) -> None:
    """Observe the push latency of a batch the writer has just handed to the channel layer."""
    if not written:
        return
    try:
        _observe_oldest(PUSH_LATENCY, written)
    except Exception:
        logger.exception("push latency not observed")


def _observe_oldest(histogram: Histogram, written: Sequence) -> None:
    emitted = [item.entry.emitted for item in written if item.entry.emitted]
    if emitted:
        histogram.observe(max(0.0, time.time() - min(emitted)))


def _count(entries: Iterable) -> None:
    """One increment per label set per batch (a batch can hold two thousand entries)."""
    tally: Tally[tuple] = Tally()
    for entry in entries:
        kind = entry.kind
        if kind == "attempt":
            tally[(ATTEMPTS, entry.outcome or "unknown")] += 1
        elif kind == "sleep":
            tally[(RETRIES,)] += 1
        elif kind == "call_result":
            tally[(CALLS, entry.outcome or "unknown")] += 1
            if is_fast_fail(entry.outcome):
                tally[(FAST_FAILS, entry.outcome)] += 1
        elif kind in _GIVE_UP_KINDS:
            tally[(GIVE_UPS, kind)] += 1
        elif kind == "transition":
            tally[(TRANSITIONS, entry.state_from or "unknown", entry.state_to or "unknown")] += 1
        elif kind == "burst_end":
            wall_ms = (entry.data or {}).get("wall_ms")
            if isinstance(wall_ms, int | float):
                BURST_DURATION.observe(wall_ms / 1000)
    for (metric, *labels), amount in tally.items():
        (metric.labels(*labels) if labels else metric).inc(amount)


def socket_opened(consumer: str) -> None:
    """A live websocket of ``consumer`` ("lab", "dashboard") was accepted."""
    WEBSOCKETS.labels(consumer).inc()


def socket_closed(consumer: str) -> None:
    """A websocket counted by :func:`socket_opened` closed."""
    WEBSOCKETS.labels(consumer).dec()


class BreakerStates(Collector):
    """``failurelab_breaker_sessions{classroom, state}``: lab sessions per class whose breaker
    snapshot is in each state, read from the database at scrape time (one grouped query)."""

    def collect(self):
        family = GaugeMetricFamily(
            f"{_NS}_breaker_sessions",
            "Lab sessions per class by breaker state (the database snapshot, written on every "
            "transition and at the end of every burst).",
            labels=["classroom", "state"],
        )
        counts: Tally[tuple[str, str]] = Tally()
        rows = (
            LabSession.objects.order_by()
            .values("classroom_id", "breaker_snapshot__state")
            .annotate(n=Count("id"))
        )
        for row in rows:
            state = row["breaker_snapshot__state"]
            if state not in BreakerState.values:
                state = BreakerState.CLOSED  # as LabSession.breaker_state reads it
            counts[(str(row["classroom_id"]), state)] += row["n"]
        for (classroom, state), n in sorted(counts.items()):
            family.add_metric([classroom, state], n)
        yield family


def exposition(path: str | None = None) -> bytes:
    """Every process's metrics in ``path`` (the metrics directory), added up, plus the breaker
    states, in Prometheus's text format."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path or _DIRECTORY)
    registry.register(BreakerStates())
    return generate_latest(registry)


def mark_process_dead(identifier: str | None = None) -> None:
    """Drop the live gauges of a process that has exited (this one by default)."""
    multiprocess.mark_process_dead(identifier or process_id(), _DIRECTORY)


# Every process that loaded this module drops its live gauges when it exits normally (a
# SIGKILLed process cannot: docs/operations.md says what that leaves behind).
atexit.register(mark_process_dead)
