"""Steady traffic on the class's shared dependency through the real stack: what it costs.

    .venv/bin/python benchmarks/storm_bench.py [--sessions 30] [--rate 10] [--for 60]
        [--workers 2] [--policy resilient] [--servers 64] [--service-ms 40] [--profile DIR]

Starts its own ``redis-server`` on a free port, uses its own SQLite file (or DATABASE_URL),
migrates, starts ``--workers`` real ``celery worker`` processes (the command ``make run``
uses; each starts its journal-writer process), puts ``--sessions`` bot students of one class
on the class's shared dependency with ``manage.py simulate_class``'s service and runs their
traffic (``--rate`` calls/s each, seeded Poisson arrivals, for ``--for`` seconds). The shared
dependency is sized well above the offered load by default, so the figures are the stack's
costs, not a storm. Prints:

- attempts per second sustained (the journal's attempt rows per second of their engine time,
  over the seconds when every run's arrivals are going: mean and lowest second);
- journal rows per second written (every row of the class, first commit to last);
- the lag from an attempt's end (its engine time) to its row's ``created_at``, stamped in the
  writer's transaction just before the COMMIT (p50/p99);
- the error of each attempt's real duration against the model's reply: the engine time at
  which the client saw the answer minus the answer time the model gave (``answer_us``, Redis
  ``TIME``; both clocks are this machine's), p50/p99/max;
- Redis round trips per attempt: the server's read events (``INFO stats``
  ``total_reads_processed``: one per command, or per batch of commands, arriving; the
  engine hub sends the commands its callers have ready together), and the commands per
  attempt from ``INFO commandstats`` deltas, no MONITOR: commands the engine's Lua scripts
  call are counted by Redis too and are set apart; the decisions are counted by the
  ``TIME`` the shared model's script calls once per decision; the other scripts are the
  breaker's and the budget's; the rest is the broker's and the channel layer's;
- CPU per process (``/proc/<pid>/stat`` user+system) over the run, in ms per attempt: each
  worker, each of its child processes (the journal writer), ``redis-server``.

With ``--profile DIR`` every thread of the workers and their writers is profiled on its CPU
clock (``benchmarks/cpu_profile``); ``benchmarks/cpu_profile/report.py DIR`` prints the top
functions. The profiler's cost changes the figures above: profile and measure in separate runs.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import SERVER_ENV, Bench, int_range, pct, run  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(stat.parent.name))
    return out


def prepare(bench: Bench) -> None:
    """The run's environment (after the arguments are parsed): the deployed settings, its own
    redis-server and database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    os.environ.update(SERVER_ENV)
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ["REDIS_URL"] = bench.private_redis()[0]  # always its own: its INFO is the run's
    os.environ["REDIS_DB_BASE"] = "0"
    bench.database("storm-bench")


def setup_django() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_worker(
    bench: Bench, i: int, concurrency: int, profile: str | None = None
) -> subprocess.Popen:
    from lab_project.processes import worker_cmd

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    if profile:  # cProfile (CPU time) of every thread of the worker and its writer
        Path(profile).mkdir(parents=True, exist_ok=True)
        env["CPU_PROFILE_DIR"] = profile
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "benchmarks" / "cpu_profile"), str(ROOT), env.get("PYTHONPATH", "")]
        )
    log = Path(tempfile.gettempdir()) / f"failurelab-storm-worker{i}.log"
    proc = bench.start(
        f"worker {i}",
        [*worker_cmd(concurrency), "-n", f"storm{i}-{os.getpid()}@%h", "--without-heartbeat",
         "--without-gossip", "--without-mingle"],
        env=env, log=log,
    )  # fmt: skip
    bench.wait_ready(proc, "the worker", lambda: b"ready." in log.read_bytes(), str(log))
    return proc


def make_class(args):
    from labs.models import Classroom, Scenario, SharedDependencyConfig

    room = Classroom.objects.create(name=f"storm bench {time.monotonic_ns()}")
    scenario = Scenario.objects.create(
        slug=f"storm-{time.monotonic_ns()}",
        title="storm bench",
        script={"name": "storm", "seed": 1, "dependency": {"mode": "shared"},
                "policy": {"max_attempts": 4}, "steps": []},
    )  # fmt: skip
    room.scenarios.add(scenario)
    SharedDependencyConfig.objects.create(
        classroom=room, servers=args.servers, service_ms=args.service_ms,
        max_queue_ms=args.max_queue_ms,
    )  # fmt: skip
    return room


def processes(workers: list[subprocess.Popen], bench: Bench) -> dict[str, int]:
    named = {}
    for i, w in enumerate(workers):
        named[f"worker {i + 1}"] = w.pid
        for k, child in enumerate(sorted(children(w.pid))):
            named[f"worker {i + 1} child {k + 1} (writer)"] = child
    named["redis-server"] = bench.redis_proc.pid
    return named


def commandstats(client) -> Counter:
    """Calls per command, and under ``"usec:<command>"`` the microseconds Redis spent in them."""
    stats = client.info("commandstats")
    calls = Counter({name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()})
    usec = Counter(
        {"usec:" + name.removeprefix("cmdstat_"): v["usec"] for name, v in stats.items()}
    )
    return calls + usec


def lua_commands() -> set[str]:
    """Commands the engine's Lua scripts call (Redis counts them in commandstats too)."""
    names = set()
    for script in (ROOT / "labs/engine/redis/lua").glob("*.lua"):
        names |= {m.lower() for m in re.findall(r"redis\.call\(['\"](\w+)", script.read_text())}
    return names


def measure(args, bench: Bench) -> None:
    prepare(bench)
    setup_django()
    import redis
    from django.db.models import Max, Min

    from labs.models import JournalEvent, Traffic
    from labs.services.simulate import classroom_simulate

    workers = [
        start_worker(bench, i + 1, args.concurrency, args.profile) for i in range(args.workers)
    ]
    try:
        time.sleep(2)  # the writer processes start beside the workers
        room = make_class(args)
        procs = processes(workers, bench)
        rclient = redis.Redis.from_url(os.environ["REDIS_URL"])
        cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        cmd0 = commandstats(rclient)
        reads0 = rclient.info("stats")["total_reads_processed"]
        t0 = time.monotonic()
        sim = classroom_simulate(
            classroom=room, students=args.sessions, policy=args.policy, rate=args.rate,
            duration_s=args.for_s, arrivals="poisson",
        )  # fmt: skip
        ids = [t.pk for t in sim.traffic]
        while Traffic.objects.filter(pk__in=ids, status__in=Traffic.ACTIVE_STATUSES).exists():
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        cpu1 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        cmd1 = commandstats(rclient)
        reads1 = rclient.info("stats")["total_reads_processed"]
    finally:
        for w in workers:  # their writers flush the journal as they stop
            bench.stop(w)

    runs = list(Traffic.objects.filter(pk__in=ids))
    statuses = Counter(r.status for r in runs)
    rows = JournalEvent.objects.filter(session__classroom=room)
    attempts = list(
        rows.filter(kind="attempt").values_list("t_ms", "created_at", "data", "outcome")
    )
    n = len(attempts)
    if not n:
        raise SystemExit(f"no attempt was journaled (traffic: {dict(statuses)})")
    per_second = Counter(int(t_ms // 1000) for t_ms, *_ in attempts)
    # The steady seconds: every run's arrivals going (after the last start, before the first
    # run's schedule ends).
    first = int(max(r.started_at for r in runs).timestamp()) + 1
    last = int(min(r.started_at for r in runs).timestamp()) + args.for_s - 1
    steady = [per_second[s] for s in range(first, last)] or [n]
    span = rows.aggregate(a=Min("created_at"), b=Max("created_at"))
    row_count = rows.count()
    write_span = (span["b"] - span["a"]).total_seconds() or 1.0
    lag = [created.timestamp() * 1000 - t_ms for t_ms, created, _d, _o in attempts]
    err = [
        t_ms - d["answer_us"] / 1000
        for t_ms, _c, d, _o in attempts
        if d.get("answer_us") is not None
    ]
    outcomes = Counter(o for *_x, o in attempts)
    calls = rows.filter(kind="call_result").count()

    print(f"storm_bench: {args.sessions} sessions x {args.rate} calls/s (poisson) for "
          f"{args.for_s} s, policy {args.policy}, {args.workers} worker process(es); shared "
          f"dependency {args.servers} servers x {args.service_ms} ms (capacity "
          f"{args.servers * 1000 // args.service_ms}/s), max queue {args.max_queue_ms} ms; "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(f"traffic runs: {dict(statuses)}; {calls} calls, {n} attempts "
          f"({', '.join(f'{k} {v}' for k, v in outcomes.most_common())}); "
          f"wall {elapsed:.1f} s")  # fmt: skip
    print()
    print(f"{'attempts/s mean':>16} {'lowest second':>14} {'rows/s written':>15} "
          f"{'lag p50 ms':>11} {'lag p99 ms':>11} {'dur err p50':>12} {'p99 ms':>7} "
          f"{'max ms':>7}")  # fmt: skip
    print(f"{sum(steady) / len(steady):>16.1f} {min(steady):>14} {row_count / write_span:>15.1f} "
          f"{pct(lag, 0.5):>11.1f} {pct(lag, 0.99):>11.1f} {pct(err, 0.5):>12.2f} "
          f"{pct(err, 0.99):>7.2f} {max(err):>7.2f}")  # fmt: skip
    print()
    delta = cmd1 - cmd0
    scripted = lua_commands()
    usec = Counter({k[5:]: v for k, v in delta.items() if k.startswith("usec:")})
    delta = Counter({k: v for k, v in delta.items() if not k.startswith("usec:")})
    trips = Counter({k: v for k, v in delta.items() if k not in scripted})
    inner = Counter({k: v for k, v in delta.items() if k in scripted})
    decisions = delta["time"]  # the shared model's script calls TIME once per decision
    scripts = delta["evalsha"] + delta["eval"]
    print(
        f"Redis round trips per attempt (read events on the server: a command, or a batch of "
        f"them, arriving): {(reads1 - reads0) / n:.2f}"
    )
    print(f"Redis commands per attempt ({sum(trips.values()) / n:.2f} in all):")
    print(f"    {'decision (shared model script)':<34} {decisions / n:>8.3f}")
    print(f"    {'breaker and budget scripts':<34} {(scripts - decisions) / n:>8.3f}")
    for name, count in trips.most_common(6):
        if name not in ("evalsha", "eval"):
            print(f"    {name + ' (broker, channel layer)':<34} {count / n:>8.3f}")
    print(
        f"    (inside the scripts, not sent by a client: {sum(inner.values()) / n:.2f} "
        "commands/attempt)"
    )
    executed = sum(v for k, v in usec.items() if k not in scripted)
    print(
        f"Redis time in the commands themselves (commandstats usec, the scripts' inner "
        f"commands included): {executed / n:.1f} us/attempt, of which the scripts "
        f"{(usec['evalsha'] + usec['eval']) / n:.1f} us"
    )
    print()
    print(f"{'CPU':<32} {'s':>8} {'ms/attempt':>11} {'% of one core':>14}")
    summed = 0.0
    for name in procs:
        if cpu0[name] is None or cpu1[name] is None:
            print(f"{name:<32} {'(gone)':>8}")
            continue
        used = cpu1[name] - cpu0[name]
        summed += used
        print(f"{name:<32} {used:>8.2f} {1000 * used / n:>11.3f} {100 * used / elapsed:>13.1f}%")
    print(f"{'summed':<32} {summed:>8.2f} {1000 * summed / n:>11.3f} "
          f"{100 * summed / elapsed:>13.1f}%")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int_range(1, 200), default=30, help="1 to 200")
    parser.add_argument("--rate", type=int_range(1, 20), default=10,
                        help="calls/s per session (1 to 20)")  # fmt: skip
    parser.add_argument("--for", dest="for_s", type=int_range(1, 300), default=60,
                        help="seconds (1 to 300)")  # fmt: skip
    parser.add_argument("--workers", type=int_range(1, 16), default=2, help="1 to 16")
    parser.add_argument("--concurrency", type=int_range(1, 512), default=64,
                        help="threads per worker (1 to 512)")  # fmt: skip
    parser.add_argument("--policy", default="resilient",
                        choices=("naive", "jitter", "budget", "breaker", "resilient", "mixed"))  # fmt: skip
    parser.add_argument("--servers", type=int_range(1, 1000), default=64)
    parser.add_argument("--service-ms", type=int_range(1, 10_000), default=40)
    parser.add_argument("--max-queue-ms", type=int_range(0, 60_000), default=1000)
    parser.add_argument("--profile", metavar="DIR",
                        help="profile the workers' and writers' threads (CPU time) into DIR "
                        "(benchmarks/cpu_profile; print with its report.py)")  # fmt: skip
    return parser


if __name__ == "__main__":
    run("storm_bench", parser(), measure)
