"""A burst on a worker: its calls on the hub, its events to the journal writer, its end."""

from __future__ import annotations

import random
import time

from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst
from labs.presenters.text import lab_error
from labs.services.bursts import BURSTS, restored_entry
from labs.worker import chain, runs
from labs.worker.hub import bookkeeping, get_hub, hub_redis
from labs.worker.writers import get_writer


def burst_run(*, burst_id: int) -> str:
    """Run a queued burst to its end on this worker; returns the final status ("skipped" when
    there was nothing to claim).

    Stores the burst's start state first (``Burst.start_state``: what a replay needs), then
    runs its calls with an rng seeded as recorded there on the process's engine hub. Every
    engine event goes to the journal writer; the row is marked DONE only after all of them
    are committed, FAILED (the error journaled) when the engine raised."""
    return runs.run_claimed(BURSTS, burst_id, _work, _failed)


def _work(burst: Burst) -> runs.Outcome:
    hub = get_hub()
    session = burst.session
    writer = get_writer()
    watch: runtime.DependencyWatch | None = None

    def after(event) -> None:
        if event.kind == "call_result" and watch is not None:
            watch.check()

    sink = runs.event_sink(session, burst_id=burst.pk, then=after)

    with bookkeeping():
        rng_seed = runtime.burst_rng_seed(session)
        state, restored = runtime.start_state(session, burst, rng_seed)
        if restored:
            writer.submit(restored_entry(session, burst.pk))
        Burst.objects.filter(pk=burst.pk).update(start_state=state)
        engine = chain.build_engine(
            session, sink=sink, client=hub_redis(), clock=hub.clock, rng=random.Random(rng_seed)
        )
        # A burst never touches the database until it ends (the journal writer does the
        # writing): give the connection back.
        runs.release_connection()
        watch = runtime.DependencyWatch(session, engine, engine.rng, clock=hub.clock)
    result = hub.run(
        lambda: engine.client.run_burst(
            burst.size,
            concurrency=burst.concurrency,
            first_call=burst.first_call_no,
            burst=burst.number,
        )
    )
    return runs.Outcome(Burst.Status.DONE, {"summary": result.summary()})


def _failed(burst: Burst, exc: Exception) -> runs.Outcome:
    error = lab_error(exc)
    entry = journal.entry(
        burst.session,
        "burst_failed",
        f"burst {burst.number} stopped by an error in the lab: {error}",
        burst_id=burst.pk,
        emitted=time.time(),
    )
    return runs.Outcome(Burst.Status.FAILED, {"error": error}, entry)
