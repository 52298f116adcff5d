"""Runs a scenario script through the real stack: services, a Celery worker, Redis, the journal.

:class:`WorkerExecutor` follows the engine's ``Executor`` protocol, so
``labs.engine.run_scenario(script, executor=WorkerExecutor(...))`` returns the very JSON the
engine's own runner prints, only measured on real bursts: each burst is started through
``services.bursts.burst_start``, run by whichever worker takes it, and read back from the
journal once it is done. Used by ``manage.py run_scenario`` and by the integration tests that
compare the worker's results with the engine's.
"""

from __future__ import annotations

import time
from typing import Any

from labs.engine import Event
from labs.engine.events import EVENT_KINDS
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import bursts, lab


class NoWorker(RuntimeError):
    """No worker finished a burst within the timeout."""


class WorkerExecutor:
    """Executor over one lab session; ``clock`` is the wall clock live bursts use."""

    def __init__(self, session: LabSession, *, user, burst_timeout: float = 120.0) -> None:
        self.session = session
        self.user = user
        self.clock = runtime.CLOCK
        self.burst_timeout = burst_timeout

    def set_dependency(self, dependency: dict[str, Any]) -> None:
        lab.session_set_dependency(session=self.session, user=self.user, changes=dependency)

    def set_policy(self, policy: dict[str, Any]) -> None:
        lab.session_set_policy(session=self.session, user=self.user, changes=policy)

    def burst(self, size: int, concurrency: int = 1) -> list[Event]:
        burst = bursts.burst_start(
            session=self.session, user=self.user, size=size, concurrency=concurrency
        )
        deadline = time.monotonic() + self.burst_timeout
        while True:
            burst.refresh_from_db(fields=["status", "error"])
            if burst.status not in Burst.ACTIVE_STATUSES:
                break
            if time.monotonic() > deadline:
                raise NoWorker(
                    f"burst {burst.number} was not finished after {self.burst_timeout:.0f} s; "
                    "is a Celery worker running (make run starts one)?"
                )
            time.sleep(0.01)
        if burst.status != Burst.Status.DONE:
            raise RuntimeError(f"burst {burst.number} ended {burst.status}: {burst.error}")
        return [
            event_from_row(row)
            for row in JournalEvent.objects.filter(burst=burst, kind__in=EVENT_KINDS).select_related("burst").order_by(
                "seq"
            )
        ]

    def wait(self, ms: float) -> None:
        self.clock.sleep(ms / 1000)


def event_from_row(row: JournalEvent) -> Event:
    """The engine event a journal row was made from (the inverse of journal.entry_from_event)."""
    data = dict(row.data or {})
    reason = data.pop("reason", None)
    return Event(
        kind=row.kind,
        at_ms=row.t_ms,
        explain=row.message,
        call=row.call_no,
        burst=row.burst.number if row.burst_id else None,
        attempt=row.attempt_no,
        outcome=row.outcome or None,
        error=row.error or None,
        latency_ms=row.latency_ms,
        backoff_ms=row.backoff_ms,
        state_from=row.state_from or None,
        state_to=row.state_to or None,
        reason=reason,
        data=data,
    )
