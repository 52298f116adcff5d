"""Bursts through a real Celery worker and a real Redis (docs/bursts.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from pathlib import Path

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, connections, transaction

from labs.journal import broadcast
from labs.live import liveness, runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import bursts, lab
from labs.worker import bursts as worker_bursts
from labs.worker.writers import get_writer
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def new_session(script: dict | None = None, username: str = "alice") -> LabSession:
    scenario = make_scenario(f"s-{username}", script=script or tour_script())
    room = make_classroom(f"Class {username}", join_code=None or _code(username))
    room.scenarios.add(scenario)
    student = make_student(username, room)
    return lab.session_open(user=student, classroom=room, scenario=scenario)


def _code(seed: str) -> str:
    return (seed.upper() + "XXXXXXXX")[:8].replace("_", "X")


def finished(burst: Burst, timeout: float = 60.0) -> Burst:
    def done():
        burst.refresh_from_db()
        return burst if burst.status not in Burst.ACTIVE_STATUSES else None

    try:
        return wait_for(done, timeout, message=f"burst {burst.pk} to finish")
    except pytest.fail.Exception:
        import faulthandler
        import sys

        burst.refresh_from_db()
        print(f"burst {burst.pk} still {burst.status} (worker {burst.worker!r}); threads:",
              file=sys.stderr)  # fmt: skip
        faulthandler.dump_traceback(file=sys.stderr)
        raise


def interrupted(burst: Burst) -> None:
    """Reap until the dead worker's burst is marked interrupted (its heartbeat must go stale
    first: LAB_BURST_STALE_SECONDS after the kill)."""

    def marked():
        bursts.bursts_reap_stale(session_id=burst.session_id)
        burst.refresh_from_db()
        return burst.status == Burst.Status.INTERRUPTED

    wait_for(marked, timeout=30, interval=0.5, message="the burst to be marked interrupted")


def attempts_of(burst: Burst) -> list[int]:
    """Attempts per call of one burst, from the journal."""
    calls: dict[int, int] = {}
    for ev in JournalEvent.objects.filter(burst=burst).order_by("seq"):
        if ev.kind == "call_result":
            calls[ev.call_no] = ev.data["attempts"]
    return [calls[c] for c in sorted(calls)]


def test_redelivered_burst_message_does_nothing(celery_worker):
    session = new_session()
    burst = bursts.burst_start(session=session, user=session.owner, size=2)
    finished(burst)
    rows = JournalEvent.objects.filter(session=session).count()
    assert worker_bursts.burst_run(burst_id=burst.pk) == "skipped"
    get_writer().flush()
    assert JournalEvent.objects.filter(session=session).count() == rows


def test_ten_threads_starting_a_burst_at_once_start_exactly_one(transactional_db, request):
    """No worker consumes until every thread has clicked: the started burst stays QUEUED, so it
    cannot end before a late thread arrives (under load one can come seconds after the
    others), and every thread but one must meet it active."""
    session = new_session(tour_script(dependency={"mode": "healthy", "latency_ms": 5}))
    barrier = threading.Barrier(10)
    started, refused, errors = [], [], []

    def click():
        try:
            barrier.wait()
            started.append(bursts.burst_start(session=session, user=session.owner, size=4))
        except bursts.BurstAlreadyRunning as exc:
            refused.append(str(exc))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=click) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(started) == 1
    assert len(refused) == 9
    assert all("already running" in message for message in refused)
    request.getfixturevalue("celery_worker")  # now a worker runs the one burst
    assert finished(started[0]).status == Burst.Status.DONE
    assert Burst.objects.filter(session=session).count() == 1


def test_rolled_back_transaction_enqueues_nothing(transactional_db):
    session = new_session()
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    with pytest.raises(RuntimeError), transaction.atomic():
        bursts.burst_start(session=session, user=session.owner, size=3)
        raise RuntimeError("the request failed after queueing")
    assert broker.llen("celery") == 0
    assert not Burst.objects.filter(session=session).exists()
    # The rolled-back reservation left the call numbers as they were.
    session.refresh_from_db()
    assert session.next_call_no == 1


def test_committed_burst_is_enqueued_on_the_broker(transactional_db):
    session = new_session()
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    bursts.burst_start(session=session, user=session.owner, size=3)
    assert broker.llen("celery") == 1


def test_bad_burst_size_is_refused_with_field_and_range(transactional_db):
    session = new_session()
    with pytest.raises(bursts.BurstInvalid) as info:
        bursts.burst_start(session=session, user=session.owner, size=21, concurrency=0)
    message = str(info.value)
    assert "Calls in the burst: must be between 1 and 20 (got 21)" in message
    assert "Concurrent callers: must be between 1 and 10 (got 0)" in message
    assert not Burst.objects.exists()


def test_worker_killed_mid_burst_marks_it_interrupted_and_the_next_burst_runs(
    worker_process, settings
):
    # Slow attempts so the kill lands mid-burst. Only the victim consumes the queue.
    session = new_session(tour_script(dependency={"mode": "healthy", "latency_ms": 200}))
    victim = worker_process()
    burst = bursts.burst_start(session=session, user=session.owner, size=20)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="attempt").count() >= 3,
        message="a few attempts journaled",
    )
    # The worker says in Redis that it runs the burst (labs.live.liveness); a killed
    # worker's word expires with the staleness window, and the burst is reaped.
    burst.refresh_from_db()
    wait_for(lambda: liveness.alive([burst]) == {burst.pk}, 10, message="the worker's word")
    victim.kill()
    settings.LAB_BURST_STALE_SECONDS = 2
    interrupted(burst)
    events = JournalEvent.objects.filter(session=session)
    assert events.filter(kind="burst_interrupted", burst=burst).count() == 1
    pairs = list(events.filter(kind="attempt").values_list("call_no", "attempt_no"))
    assert len(pairs) == len(set(pairs)), "an attempt was journaled twice"
    assert 3 <= len(pairs) < 20
    # The session can burst again straight away, on a fresh worker.
    worker_process()
    session.refresh_from_db()
    nxt = bursts.burst_start(session=session, user=session.owner, size=2)
    assert finished(nxt).status == Burst.Status.DONE
    assert nxt.first_call_no == 21


def test_journal_writer_outlives_a_killed_worker_and_writes_every_attempt_it_was_handed(
    worker_process, settings
):
    """SIGKILL to the worker's main process only (what the OOM killer does): the journal
    writer process reads to the end of its pipe, writes everything, then exits by itself."""
    session = new_session(tour_script(dependency={"mode": "healthy", "latency_ms": 150}))
    victim = worker_process()
    writers_before = _writer_pids(victim.proc.pid)
    assert len(writers_before) == 1, "the worker starts its journal writer when it is ready"
    burst = bursts.burst_start(session=session, user=session.owner, size=20)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="attempt").count() >= 3,
        message="a few attempts journaled",
    )
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(10)
    wait_for(lambda: not any(_alive(pid) for pid in writers_before), timeout=30,
             message="the orphaned journal writer to finish and exit")  # fmt: skip
    seen = runtime.session_store(session.pk).export_state()["dependency"]["attempts"]
    journaled = JournalEvent.objects.filter(burst=burst, kind="attempt").count()
    # The dependency counts an attempt just before the engine emits it: at most the one
    # attempt in flight at the kill is missing.
    assert seen - 1 <= journaled <= seen
    settings.LAB_BURST_STALE_SECONDS = 2
    interrupted(burst)
    # No lease or lock without a TTL is left in this session's namespace.
    engine = redis.Redis.from_url(settings.LAB_ENGINE_REDIS_URL)
    for key in engine.scan_iter(f"{runtime.namespace(session.pk)}:probe:*"):
        assert engine.pttl(key) > 0


def test_stopping_the_workers_process_group_finishes_the_burst_and_journals_all_of_it(
    worker_process,
):
    """What ``make run`` does to stop a worker (scripts/services.py): SIGTERM to its process
    group mid-burst, a wait for the worker, then SIGKILL to whatever is left in the group.

    The journal is held locked from the SIGTERM until the burst's last attempt, so the writer
    still has most of the burst's rows when the worker begins to stop. The worker finishes the
    burst (Celery's warm shutdown); its journal writer process is not killed by the SIGTERM,
    and the worker has it write everything and waits for it before exiting, so the SIGKILL
    finds nothing holding rows; nothing starts a second writer."""
    session = new_session(tour_script(dependency={"mode": "healthy", "latency_ms": 100}))
    victim = worker_process()
    writers = _writer_pids(victim.proc.pid)
    assert len(writers) == 1
    burst = bursts.burst_start(session=session, user=session.owner, size=12)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="attempt").count() >= 2,
        message="a few attempts journaled",
    )
    store = runtime.session_store(session.pk)
    with _journal_locked():
        os.killpg(victim.proc.pid, signal.SIGTERM)
        wait_for(lambda: store.export_state()["dependency"]["attempts"] == 12,
                 message="the burst's last attempt")  # fmt: skip
    victim.proc.wait(60)
    assert not any(_alive(pid) for pid in writers), "the writer outlived the worker"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(victim.proc.pid, signal.SIGKILL)
    burst.refresh_from_db()
    assert burst.status == Burst.Status.DONE
    assert attempts_of(burst) == [1] * 12
    assert JournalEvent.objects.filter(burst=burst, kind="burst_end").count() == 1
    log = victim.log_path.read_text()
    assert "journal writer process died" not in log, log


@contextlib.contextmanager
def _journal_locked():
    """Keep the journal writer from committing: SQLite's database write lock, PostgreSQL's
    table lock on the journal (reads go on)."""
    with transaction.atomic(), connection.cursor() as cursor:
        table = JournalEvent._meta.db_table
        if connection.vendor == "postgresql":
            cursor.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        else:
            cursor.execute(f"UPDATE {table} SET id = id WHERE 0 = 1")  # noqa: S608
        yield


def _writer_pids(worker_pid: int) -> list[int]:
    """The journal writer processes the worker started (its children running journal_process)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == worker_pid and b"labs.worker.writer_process" in cmdline:
            pids.append(int(entry.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_redis_losing_the_breaker_restores_it_from_the_snapshot(celery_worker):
    script = tour_script(dependency={"mode": "down", "latency_ms": 1})
    script["policy"]["breaker"]["cooldown_ms"] = 60000
    session = new_session(script)
    first = finished(bursts.burst_start(session=session, user=session.owner, size=6))
    assert attempts_of(first) == [4, 4, 4, 0, 0, 0]
    session.refresh_from_db()
    assert session.breaker_snapshot["state"] == "open"

    redis.Redis.from_url(settings.LAB_ENGINE_REDIS_URL).flushdb()
    assert not runtime.session_store(session.pk).has_state()

    second = finished(bursts.burst_start(session=session, user=session.owner, size=2))
    restored = JournalEvent.objects.filter(session=session, kind="state_restored")
    assert restored.count() == 1
    assert restored.get().burst_id == second.pk
    # Still open: both calls fail fast without touching the dependency.
    assert attempts_of(second) == [0, 0]
    assert runtime.session_store(session.pk).has_state()


def test_a_dead_workers_burst_is_interrupted_and_pushed_without_a_page_load(
    worker_process, monkeypatch
):
    """SIGKILL to the worker's main process mid-burst, then two fresh idle workers: their reaper
    marks the burst INTERRUPTED by itself (no page load, no new burst, nothing reaped from this
    process), journals it exactly once and pushes the row to the session's page."""
    monkeypatch.setenv("LAB_BURST_STALE_SECONDS", "2")
    session = new_session(tour_script(dependency={"mode": "healthy", "latency_ms": 300}))
    victim = worker_process()
    burst = bursts.burst_start(session=session, user=session.owner, size=20)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="attempt").count() >= 2,
        message="a few attempts journaled",
    )

    async def watch_the_page() -> list[dict]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(broadcast.session_group(session.pk), channel)
        os.kill(victim.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(victim.proc.wait, 10)
        await asyncio.to_thread(worker_process)
        await asyncio.to_thread(worker_process)
        try:
            async with asyncio.timeout(60):
                while True:
                    message = await layer.receive(channel)
                    kinds = [e["kind"] for e in message.get("events", [])]
                    if "burst_interrupted" in kinds:
                        return message["events"]
        except TimeoutError:
            return []

    pushed = async_to_sync(watch_the_page)()
    burst.refresh_from_db()
    assert pushed, f"no burst_interrupted push within 60 s; the burst is {burst.status}"
    assert [e["burst"] for e in pushed if e["kind"] == "burst_interrupted"] == [burst.pk]
    burst.refresh_from_db()
    assert burst.status == Burst.Status.INTERRUPTED
    # Two reapers, one mark: the claim is a conditional update.
    assert JournalEvent.objects.filter(burst=burst, kind="burst_interrupted").count() == 1
