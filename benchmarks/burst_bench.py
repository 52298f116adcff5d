"""Bursts on a real worker: honest timing and 100 sessions at once.

    .venv/bin/python benchmarks/burst_bench.py [--sessions 100] [--calls 20]

Uses its own SQLite file (or DATABASE_URL) and its own ``redis-server`` on a free port
(``--shared-redis``: the machine's REDIS_URL, databases ``BENCH_REDIS_DB_BASE``, default 4..7),
migrates, starts one real ``celery worker`` process (the command ``make run`` uses) and prints:

(a) the tour's wall time per burst against the sum of its configured sleeps, the cost added per
    attempt, the first burst after the worker started on its own, and the same burst with a
    naive synchronous sink (an INSERT plus an
    ``async_to_sync(group_send)`` per event on the timing path) for comparison, and this
    machine's floor under that burst: its sleeps and one ``PING`` per Redis round trip it
    makes, nothing else;
(b) N sessions each starting a C-call burst at the same moment on the one worker: completion,
    lost and duplicated events (journal against the events the engine must emit), p50/p99
    slowdown against each burst's theoretical time, and journal rows written per second.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import Bench, int_range, pct, run  # noqa: E402

sys.setswitchinterval(0.0005)  # as on a worker (lab_project/celery.py)


def prepare(bench: Bench, shared_redis: bool = False) -> None:
    """The run's environment (after the arguments are parsed): its own redis-server (with
    ``shared_redis`` or BENCH_REDIS_URL the machine's, databases BENCH_REDIS_DB_BASE, default
    4..7) and its own SQLite file (or DATABASE_URL)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    bench.redis(shared=shared_redis)
    bench.database("burst-bench")


def setup_django():
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import redis
    from django.conf import settings

    for db in range(settings.REDIS_DB_BASE, settings.REDIS_DB_BASE + 4):
        redis.Redis.from_url(settings.REDIS_URL, db=db).flushdb()


def start_worker(bench: Bench, concurrency: int):
    from lab_project.processes import worker_cmd

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    log = Path(tempfile.gettempdir()) / f"failurelab-bench-worker-{os.getpid()}.log"
    proc = bench.start(
        "worker",
        [*worker_cmd(concurrency), "--without-heartbeat", "--without-gossip", "--without-mingle",
         "-n", f"bench-{os.getpid()}@%h"],
        env=env, log=log,
    )  # fmt: skip
    bench.wait_ready(proc, "the worker", lambda: b"ready." in log.read_bytes(), str(log))
    return proc


def make_sessions(n: int, script: dict):
    from django.contrib.auth import get_user_model

    from labs.models import Classroom, Membership, Scenario
    from labs.services.lab import session_open

    room = Classroom.objects.create(name=f"bench {time.monotonic_ns()}")
    scenario = Scenario.objects.create(
        slug=f"bench-{time.monotonic_ns()}", title="bench", script=script
    )
    room.scenarios.add(scenario)
    sessions = []
    for i in range(n):
        user = get_user_model().objects.create_user(f"bench-{room.pk}-{i}", password=None)
        Membership.objects.create(user=user, classroom=room, role=Membership.Role.STUDENT)
        sessions.append(session_open(user=user, classroom=room, scenario=scenario))
    return sessions


def tour_part(args) -> None:
    from labs.engine import run_scenario
    from labs.services.scenario_runner import WorkerExecutor

    script = {
        "name": "tour", "seed": 7,
        "dependency": {"mode": "flaky", "fail_count": 3, "latency_ms": 5},
        "policy": {"max_attempts": 4, "backoff_base_ms": 25, "backoff_cap_ms": 500,
                   "jitter": "none", "nesting": "breaker_outside",
                   "breaker": {"kind": "consecutive", "failure_threshold": 3,
                               "cooldown_ms": 2000}},
        "steps": [{"burst": 6}, {"set_dependency": {"mode": "down"}}, {"burst": 6},
                  {"set_dependency": {"mode": "healthy"}}, {"wait_ms": 2000}, {"burst": 1}],
    }  # fmt: skip
    rows = []
    first = None
    for run_no in range(args.tour_runs + 1):
        session = make_sessions(1, script)[0]
        out = run_scenario(script, executor=WorkerExecutor(session, user=session.owner))
        for i, burst in enumerate(out["bursts"]):
            sleeps = sum(burst["attempts"]) * 5 + burst["backoff_ms_total"]
            row = (i + 1, burst["wall_ms"], sleeps, sum(burst["attempts"]))
            if run_no == 0:  # the first bursts after the worker started: shown apart
                first = first or row
            else:
                rows.append(row)
    print("(a) the tour on a real worker (engine wall time of each burst; "
          f"{args.tour_runs} runs after a first one, median)")  # fmt: skip
    print(
        f"{'burst':>5} {'configured sleeps ms':>21} {'wall ms':>9} {'over':>7} {'added/attempt ms':>17}"
    )
    for b in (1, 2, 3):
        mine = [r for r in rows if r[0] == b]
        wall = statistics.median(r[1] for r in mine)
        sleeps = mine[0][2]
        attempts = mine[0][3]
        added = (wall - sleeps) / attempts if attempts else float("nan")
        print(
            f"{b:>5} {sleeps:>21.1f} {wall:>9.1f} {100 * (wall - sleeps) / sleeps:>6.2f}% {added:>17.3f}"
        )
    total_s = sum(statistics.median(r[1] for r in rows if r[0] == b) for b in (1, 2, 3))
    total_c = sum(next(r[2] for r in rows if r[0] == b) for b in (1, 2, 3))
    print(
        f"{'all':>5} {total_c:>21.1f} {total_s:>9.1f} {100 * (total_s - total_c) / total_c:>6.2f}%"
    )
    print("    seed 000's Go lab: burst 1 in 237 ms against 220 ms of sleeps (7.7 % over)")
    _, wall, sleeps, attempts = first
    print(
        f"    the first burst after the worker started (burst 1 of the first run): {wall:.1f} ms, "
        f"{100 * (wall - sleeps) / sleeps:.2f}% over its sleeps, "
        f"{(wall - sleeps) / attempts:.3f} ms added per attempt"
    )
    naive_part(script)
    floor_part(script)


def naive_part(script) -> None:
    """Burst 1 of the tour in this process with the journal on the timing path, both ways."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from labs.journal import store as journal
    from labs.journal.broadcast import session_group
    from labs.live import runtime
    from labs.worker.writer import JournalWriter
    from labs.worker.writer_process import JournalPipe

    layer = get_channel_layer()
    results = {}
    pipe = JournalPipe()
    pipe.start()
    pipe.flush(120)
    thread_writer = JournalWriter(after_write=runtime.store_snapshots_after_write)
    engine_only = "engine only, no journal"
    for label in (engine_only, "writer process (the lab's)", "writer thread, same process",
                  "naive INSERT + group_send"):  # fmt: skip
        walls = []
        for _ in range(7):
            session = make_sessions(1, script)[0]
            writer = pipe if label.startswith("writer process") else thread_writer
            if label == engine_only:

                def sink(event):
                    pass
            elif label.startswith("naive"):

                def sink(event, session=session):
                    rows = journal.record(
                        [
                            journal.entry_from_event(
                                event,
                                session_id=session.pk,
                                classroom_id=session.classroom_id,
                                burst_id=None,
                            )
                        ]
                    )
                    async_to_sync(layer.group_send)(
                        session_group(session.pk),
                        {"type": "journal.events", "events": [journal.entry_payload(rows[0])]},
                    )
            else:

                def sink(event, session=session, writer=writer):
                    writer.submit(
                        journal.entry_from_event(
                            event,
                            session_id=session.pk,
                            classroom_id=session.classroom_id,
                            burst_id=None,
                        )
                    )

            engine = runtime.build_engine(session, sink=sink, rng=random.Random(1))
            engine.dependency.arm()
            result = engine.client.run_burst(6, first_call=1, burst=1)
            writer.flush()
            walls.append(result.wall_ms)
        results[label] = statistics.median(walls)
    pipe.stop()
    base = results[engine_only]
    print("\n    burst 1 of the tour in this process (220 ms of configured sleeps, 9 attempts; "
          "median of 7):")  # fmt: skip
    print(f"    {'journal sink':<30} {'wall ms':>8} {'over sleeps/attempt':>20} "
          f"{'added by journal/attempt':>25}")  # fmt: skip
    for label, wall in results.items():
        print(
            f"    {label:<30} {wall:8.1f} {(wall - 220) / 9:17.3f} ms {(wall - base) / 9:22.3f} ms"
        )


def floor_part(script) -> None:
    """This machine's floor under the tour's burst 1: its sleeps and its Redis round trips,
    with no engine, no journal and no worker.

    Burst 1 runs once more in this process on an engine hub of its own, as on a worker, and
    what it does is recorded in order: each sleep of its caller (the dependency's latency, a
    backoff) and the hub's rounds between them (``Hub.rounds``: each round is one batch
    written to Redis, one round trip). The record is then
    replayed seven times with nothing but those sleeps, taken as the hub takes them (a
    wake-up's lateness, up to ``CATCH_UP_S``, off the next sleep), and one ``PING`` for each
    round trip, the cheapest command Redis answers. What the replay takes over its sleeps is
    what any client needs that talks to Redis as often as the engine must (the breaker's
    state is shared there), on this machine, at this hour."""
    import redis
    from django.conf import settings

    from labs.live import runtime
    from labs.worker import hub as hub_module

    timeline: list[float | None] = []  # a sleep's seconds, or None for a round trip
    hub = hub_module.Hub(name="floor-hub")
    clock_sleep = hub.clock.sleep
    seen = 0  # the hub's rounds already in the timeline

    def trips_so_far() -> None:
        nonlocal seen
        timeline.extend([None] * (hub.rounds - seen))
        seen = hub.rounds

    def recording_sleep(seconds: float) -> None:
        trips_so_far()
        timeline.append(seconds)
        clock_sleep(seconds)

    session = make_sessions(1, script)[0]
    engine = runtime.build_engine(
        session, sink=lambda event: None, rng=random.Random(1),
        client=hub.redis(runtime.engine_redis().connection_pool), clock=hub.clock,
    )  # fmt: skip
    hub.run(engine.dependency.arm)
    seen = hub.rounds
    hub.clock.sleep = recording_sleep
    try:
        result = hub.run(lambda: engine.client.run_burst(6, first_call=1, burst=1))
    finally:
        del hub.clock.sleep
    trips_so_far()
    sleeps = [s for s in timeline if s is not None]
    trips = timeline.count(None)
    attempts = result.attempts_total

    client = redis.Redis.from_url(settings.LAB_ENGINE_REDIS_URL)
    client.ping()

    def replay() -> float:
        start = time.perf_counter()
        late = 0.0
        for step in timeline:
            if step is None:
                client.ping()
                continue
            due = time.perf_counter() - late + step
            time.sleep(max(0.0, due - time.perf_counter()))
            late = min(max(0.0, time.perf_counter() - due), hub_module.CATCH_UP_S)
        return (time.perf_counter() - start) * 1000

    wall = statistics.median(replay() for _ in range(7))
    slept = sum(sleeps) * 1000
    print(
        f"\n    this machine's floor under burst 1: its {len(sleeps)} sleeps ({slept:.1f} ms) and "
        f"{trips} Redis round trips on a hub,\n    replayed with a PING each and nothing else "
        f"(median of 7): {wall:.1f} ms, {100 * (wall - slept) / slept:.2f}% over its sleeps, "
        f"{(wall - slept) / attempts:.3f} ms per attempt\n    (the target: 2 %, "
        f"{0.02 * slept / attempts:.3f} ms per attempt)"
    )


def crowd_part(args) -> None:
    from labs.models import Burst, JournalEvent
    from labs.services.bursts import burst_start

    latency = args.latency_ms
    script = {
        "name": "crowd", "seed": 1,
        "dependency": {"mode": "healthy", "latency_ms": latency},
        "policy": {"max_attempts": 4},
        "steps": [{"burst": args.calls}],
    }  # fmt: skip
    sessions = make_sessions(args.sessions, script)
    # 20 clicking threads (each starting its share of the bursts) rather than 100: PostgreSQL's
    # default max_connections is 100, and the worker needs a few too.
    clickers = min(20, args.sessions)
    barrier = threading.Barrier(clickers)
    started = [None] * args.sessions

    def go(k):
        from django.db import connections

        barrier.wait()
        for i in range(k, args.sessions, clickers):
            started[i] = burst_start(session=sessions[i], user=sessions[i].owner, size=args.calls)
        connections.close_all()

    t0 = time.monotonic()
    threads = [threading.Thread(target=go, args=(k,)) for k in range(clickers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [b.pk for b in started]
    while Burst.objects.filter(pk__in=ids, status__in=Burst.ACTIVE_STATUSES).exists():
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    bursts = list(Burst.objects.filter(pk__in=ids))
    done = sum(b.status == Burst.Status.DONE for b in bursts)
    theoretical = args.calls * latency
    slowdowns = [b.summary["wall_ms"] / theoretical for b in bursts if b.summary]
    expected = args.calls * 2 + 2  # burst_start, attempt + call_result per call, burst_end
    lost = dup = 0
    for b in bursts:
        rows = list(JournalEvent.objects.filter(burst=b).exclude(kind="burst_queued")
                    .values_list("kind", "call_no", "attempt_no"))  # fmt: skip
        lost += max(0, expected - len(rows))
        keyed = [r for r in rows if r[0] == "attempt"]
        dup += len(keyed) - len(set(keyed)) + max(0, len(rows) - expected)
    total_rows = JournalEvent.objects.filter(burst_id__in=ids).count()
    first = min(b.started_at for b in bursts)
    last = max(b.finished_at for b in bursts)
    span = (last - first).total_seconds()
    print(f"\n(b) {args.sessions} sessions each start a {args.calls}-call burst at once on one "
          f"worker (threads pool, concurrency {args.concurrency}); healthy, {latency} ms per "
          f"attempt, theoretical {theoretical} ms per burst")  # fmt: skip
    print(
        f"{'completed':>10} {'lost':>5} {'dup':>4} {'slowdown p50':>13} {'p99':>6} "
        f"{'rows/s':>8} {'first start to last end':>24}"
    )
    print(
        f"{done:>6}/{len(bursts):<3} {lost:>5} {dup:>4} {pct(slowdowns, 0.5):>12.2f}x "
        f"{pct(slowdowns, 0.99):>5.2f}x {total_rows / span:>8.0f} {span:>22.2f} s"
    )
    print(f"    (wall clock from the first click to the last burst done: {elapsed:.2f} s)")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int_range(1, 500), default=100, help="1 to 500")
    parser.add_argument("--calls", type=int_range(1, 20), default=20, help="1 to 20")
    parser.add_argument("--latency-ms", type=int_range(1, 10_000), default=20)
    parser.add_argument("--concurrency", type=int_range(1, 1024), default=128)
    parser.add_argument("--tour-runs", type=int_range(1, 100), default=3, help="1 to 100")
    parser.add_argument(
        "--shared-redis", action="store_true", help="use REDIS_URL, not a private redis-server"
    )
    return parser


def measure(args, bench: Bench) -> None:
    prepare(bench, args.shared_redis)
    setup_django()
    worker = start_worker(bench, args.concurrency)
    try:
        tour_part(args)
        crowd_part(args)
    finally:
        bench.stop(worker)


if __name__ == "__main__":
    run("burst_bench", parser(), measure)
