"""Steady traffic on the class's shared dependency through the real stack: what it costs.

    .venv/bin/python benchmarks/storm_bench.py [--sessions 30] [--rate 10] [--for 60]
        [--workers 2] [--policy resilient | --storm] [--pages 0] [--servers 64]
        [--service-ms 40] [--profile DIR]

Starts its own ``redis-server`` on a free port, uses its own SQLite file (or DATABASE_URL),
migrates, starts ``--workers`` real ``celery worker`` processes (the command ``make run``
uses; each starts its journal-writer process), puts ``--sessions`` bot students of one class
on the class's shared dependency with ``manage.py simulate_class``'s service and runs their
traffic (``--rate`` calls/s each, seeded Poisson arrivals, for ``--for`` seconds). The shared
dependency is sized well above the offered load by default, so the figures are the stack's
costs, not a storm.

``--storm`` runs the storm lesson instead (``scenarios/storm_lesson.json``, loaded as
``manage.py seed_demo`` loads it): every student opens the lesson, so each session starts with
the lesson's naive policy and calls the shared dependency; the class's dependency is the
lesson's (40 ms, a 2000 ms queue) with as many servers as keep the lesson's load, 150
attempts/s against a capacity of 200/s (8 servers at 30 sessions x 5 calls/s), unless
``--servers``, ``--service-ms`` or ``--max-queue-ms`` say otherwise; the instructor starts
everyone's traffic at once (the storm panel's service) and fires a ``down`` trigger for 8 s
(the service the panel's trigger form calls) ``TRIGGER_AT_S`` seconds in (a third of ``--for``
when shorter).

``--tiers N`` arranges the bots in a chain of students of N tiers (``labs.services.chain``)
before the traffic: the front tier's bots run it, every tier calls the next through its own
policy, the back tier calls the shared dependency. The figures count every tier's attempts;
the counts check takes the back tier's (the shared model's), and a table per tier gives the
calls in, the attempts out and the CPU per user request.

``--pages N`` also starts a real ``daphne`` (as ``benchmarks/push_bench.py`` does) and opens
N websocket clients on the sessions' lab pages (one per session, up to N, each logged in as
the session's student) and one on the instructor's storm panel, as the pages open them. They
run in this process, on the same cores as the servers.

Prints:

- attempts per second sustained (the journal's attempt rows per second of their engine time,
  over the seconds when every run's arrivals are going: mean and lowest second) and the
  highest second;
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
  worker, each of its child processes (the journal writer), ``redis-server`` and, with
  ``--pages``, ``daphne`` and whatever it forked;
- the figures beside their targets (docs/scaling.md, "The storm bench"): CPU per attempt
  summed over every process (<= 0.4 ms, set at 30 sessions x 10 calls/s with 30 pages); the
  attempt duration error's p99 over the whole run (<= 5 ms); with ``--pages``, the delay from
  a second's end to the first message bringing a page that second as a past one (the lab
  pages' ``shared`` message, the storm panel's ticks; time-stamped on receipt, against the
  Redis second they describe), p99 (<= 1 s); the journal's attempt rows counted per second
  and outcome as the model counts them (arrival second for ``offered``, ``calls``,
  ``retries``, ``shed`` and ``skipped``; answer second for ``ok``, ``error`` and ``timeout``)
  against the class's per-second counters in Redis, every cell equal; nothing lost (every
  run done, every call it made and its end journaled).

With ``--profile DIR`` every thread of the workers and their writers is profiled on its CPU
clock (``benchmarks/cpu_profile``); ``benchmarks/cpu_profile/report.py DIR`` prints the top
functions. The profiler's cost changes the figures above: profile and measure in separate runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import push_bench  # noqa: E402  (daphne, its page clients, their log-ins)
from benchmarks.bench_common import (  # noqa: E402
    SERVER_ENV,
    Bench,
    collect_static,
    free_port,
    int_range,
    pct,
    run,
)

TICK = os.sysconf("SC_CLK_TCK")
#: The storm lesson, as ``manage.py seed_demo`` loads it.
LESSON = ROOT / "scenarios" / "storm_lesson.json"
#: The lesson's load on its class's dependency: 30 students x 5 calls/s against 200/s.
LESSON_LOAD = 150 / 200
#: The lesson's trigger: ``down`` for 8 s, fired this long after the traffic starts.
TRIGGER = {"kind": "down", "duration_ms": 8000}
TRIGGER_AT_S = 10
#: The targets the figures are printed beside (docs/scaling.md, "The storm bench").
CPU_TARGET_MS = 0.4
ERROR_TARGET_MS = 5.0
DELAY_TARGET_S = 1.0
#: The model's per-second counters the journal's attempt rows are checked against.
COUNTED = ("offered", "calls", "retries", "ok", "error", "shed", "skipped", "timeout")


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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    out = []
    for child in sorted(children(pid)):
        out += [child, *descendants(child)]
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


def start_daphne(bench: Bench) -> tuple[subprocess.Popen, int]:
    """One web process as ``make run`` starts it (``push_bench.start_web``), answering;
    returns it and its port."""
    port = free_port()
    logdir = bench.log_dir()
    env = push_bench.process_env()
    collect_static(env)
    ((_, proc),) = push_bench.start_web(bench, port, logdir, env)
    bench.wait_ready(proc, "daphne", lambda: push_bench.web_answers(port), str(logdir))
    return proc, port


def shared_dependency(args) -> tuple[int, int, int]:
    """(servers, service ms, max queue ms) of the class's shared dependency: as given, else
    well above the load, or with ``--storm`` the lesson's (module docstring)."""
    from labs.models import SharedDependencyConfig

    def given(value: int | None, default: int) -> int:
        return default if value is None else value

    if not args.storm:
        return given(args.servers, 64), given(args.service_ms, 40), given(args.max_queue_ms, 1000)
    lesson = SharedDependencyConfig._meta  # the lesson's class has the defaults (seed_demo)
    service_ms = given(args.service_ms, lesson.get_field("service_ms").default)
    servers = given(args.servers, min(
        64, math.ceil(args.sessions * args.rate * service_ms / 1000 / LESSON_LOAD)
    ))  # fmt: skip
    return servers, service_ms, given(args.max_queue_ms, lesson.get_field("max_queue_ms").default)


def make_class(args, dependency: tuple[int, int, int]):
    """The class, its scenario (``--storm``: the storm lesson) and its shared dependency."""
    from labs.models import Classroom, Scenario, SharedDependencyConfig

    room = Classroom.objects.create(name=f"storm bench {time.monotonic_ns()}")
    if args.storm:
        from labs.management.commands.seed_demo import upsert_scenario

        scenario = upsert_scenario(LESSON.stem, json.loads(LESSON.read_text()), position=10)
    else:
        scenario = Scenario.objects.create(
            slug=f"storm-{time.monotonic_ns()}",
            title="storm bench",
            script={"name": "storm", "seed": 1, "dependency": {"mode": "shared"},
                    "policy": {"max_attempts": 4}, "steps": []},
        )  # fmt: skip
    room.scenarios.add(scenario)
    servers, service_ms, max_queue_ms = dependency
    SharedDependencyConfig.objects.create(
        classroom=room, servers=servers, service_ms=service_ms, max_queue_ms=max_queue_ms
    )
    return room, scenario


def make_instructor(room):
    """The instructor who teaches the class (the storm panel's user, who starts the lesson's
    traffic and fires its trigger)."""
    from django.contrib.auth import get_user_model

    from labs.services.accounts import instructor_enrol

    user = get_user_model()(username=f"storm-bench-teacher-{room.pk}")
    user.set_unusable_password()  # logged in with a session, never a password
    user.save()
    instructor_enrol(user=user, classroom=room)
    return user


def lesson_students(room, scenario, count: int) -> list:
    """``count`` students, each having opened the lesson: their sessions, with the lesson's
    policy and the class's shared dependency, as a student's first visit leaves them."""
    from django.contrib.auth import get_user_model

    from labs.models import Membership
    from labs.services.lab import session_open

    sessions = []
    for i in range(count):
        user = get_user_model()(username=f"storm-bench-c{room.pk}-{i:03d}")
        user.set_unusable_password()
        user.save()
        Membership.objects.create(user=user, classroom=room, role=Membership.Role.STUDENT)
        sessions.append(session_open(user=user, classroom=room, scenario=scenario))
    return sessions


class Pages:
    """The page clients: ``push_bench.Browser`` sockets on an event loop of their own
    (a thread of this process), one per lab page and one on the storm panel, each message
    that brings per-second figures noted with its receipt time."""

    def __init__(self, port: int, labs: list[tuple[int, str]], panel: tuple[int, str]) -> None:
        self.lab: dict[int, list[tuple[int, float]]] = {sid: [] for sid, _ in labs}
        self.panel: list[tuple[int, float]] = []
        self.connects: Counter[int] = Counter()
        self.browsers = [
            push_bench.Browser(sid, cookie, port, on_message=self._lab_message(sid))
            for sid, cookie in labs
        ]
        classroom_id, cookie = panel
        self.browsers.append(
            push_bench.Browser(0, cookie, port, path=f"ws/classes/{classroom_id}/storm/",
                               on_message=self._panel_message)
        )  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pages", daemon=True)

    def _lab_message(self, session_id: int):
        arrivals = self.lab[session_id]

        def note(message: dict, received: float) -> None:
            if message.get("type") == "shared" and message.get("active"):
                arrivals.append((message["now"], received))
            elif message.get("type") == "state":
                self.connects[session_id] += 1

        return note

    def _panel_message(self, message: dict, received: float) -> None:
        if message.get("type") in ("tick", "snapshot"):
            self.panel.append((message["now"], received))

    def open(self, timeout: float = 120.0) -> None:
        """Connect every page (a run without them would measure nothing): exits naming how
        many did not connect in ``timeout`` seconds."""
        self.thread.start()

        async def connect() -> None:
            for b in self.browsers:
                b.start()
            await asyncio.wait_for(
                asyncio.gather(*(b.connected.wait() for b in self.browsers)), timeout
            )

        try:
            asyncio.run_coroutine_threadsafe(connect(), self.loop).result()
        except TimeoutError:
            missing = sum(not b.connected.is_set() for b in self.browsers)
            raise SystemExit(f"{missing} of {len(self.browsers)} pages did not connect in "
                             f"{timeout:.0f} s") from None  # fmt: skip

    def close(self) -> None:
        async def close() -> None:
            await asyncio.gather(*(b.close() for b in self.browsers))

        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def reconnects(self) -> int:
        """Lab page sockets lost and opened again (``Browser`` reconnects as the page
        does; the page's socket says ``state`` on every connect)."""
        return sum(max(0, n - 1) for n in self.connects.values())


def delays(arrivals: list[tuple[int, float]], first: int, last: int) -> tuple[list[float], int]:
    """For each second ``first`` to ``last`` (Redis seconds), the delay from its end to the
    first message whose ``now`` is past it (the message that shows it as a past second, its
    figures whole); and how many of those seconds no message brought. Seconds already past
    when the page's first message came are left out: it was not open when they ended."""
    got: dict[int, float] = {}
    seen = None
    for now, received in arrivals:  # in the order they arrived
        if seen is None:
            seen = now
        for second in range(seen, now):
            got.setdefault(second, received - (second + 1))
        seen = max(seen, now)
    start = max(first, arrivals[0][0]) if arrivals else first
    wanted = range(start, last + 1)
    return [got[s] for s in wanted if s in got], sum(s not in got for s in wanted)


def counts_check(attempts: list[tuple], seconds: list) -> tuple[int, list[str], int]:
    """The journal's attempt rows counted per second and outcome as the model counts them,
    against the class's per-second counters in Redis (``Second``): (cells equal, the cells
    that differ as ``second name: journal N, Redis M``, rows with no decision in them)."""
    journal: Counter = Counter()
    undecided = 0
    for _t, _c, data, _o, attempt_no in attempts:
        if data.get("arrival_us") is None or data.get("answer_us") is None:
            undecided += 1
            continue
        arrived = data["arrival_us"] // 1_000_000
        answered = data["answer_us"] // 1_000_000
        outcome = data.get("outcome")
        journal[arrived, "offered"] += 1
        journal[arrived, "calls" if (attempt_no or 1) <= 1 else "retries"] += 1
        if outcome in ("shed", "skipped"):
            journal[arrived, outcome] += 1
        elif outcome in ("ok", "error", "timeout"):
            journal[answered, outcome] += 1
    redis: Counter = Counter()
    for row in seconds:
        for name in COUNTED:
            if getattr(row, name):
                redis[row.second, name] = getattr(row, name)
    equal, differ = 0, []
    for cell in sorted(set(journal) | set(redis)):
        if journal[cell] == redis[cell]:
            equal += 1
        else:
            differ.append(f"{cell[0]} {cell[1]}: journal {journal[cell]}, Redis {redis[cell]}")
    return equal, differ, undecided


def processes(
    workers: list[subprocess.Popen], bench: Bench, daphne: subprocess.Popen | None
) -> dict[str, int]:
    named = {}
    for i, w in enumerate(workers):
        named[f"worker {i + 1}"] = w.pid
        for k, child in enumerate(sorted(children(w.pid))):
            named[f"worker {i + 1} child {k + 1} (writer)"] = child
    named["redis-server"] = bench.redis_proc.pid
    if daphne is not None:
        named["daphne"] = daphne.pid
        for k, child in enumerate(descendants(daphne.pid)):
            named[f"daphne child {k + 1}"] = child
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


#: After the runs end, how long the pages stay open: the last seconds' figures arrive.
PAGES_SETTLE_S = 3.0


def open_pages(port: int, sessions: list, room, teacher, count: int) -> Pages:
    """``count`` lab pages (the first sessions', each logged in as its student) and the
    instructor's storm panel, connected."""
    pages = Pages(
        port,
        [(s.pk, push_bench.session_cookie(s.owner)) for s in sessions[:count]],
        (room.pk, push_bench.session_cookie(teacher)),
    )
    pages.open()
    return pages


def measure(args, bench: Bench) -> None:
    prepare(bench)
    setup_django()
    import redis
    from django.db.models import Max, Min
    from django.utils import timezone

    from labs.live import runtime
    from labs.models import JournalEvent, LabSession, Traffic
    from labs.services.chain import classroom_set_chain
    from labs.services.shared import classroom_fire_trigger
    from labs.services.simulate import classroom_simulate
    from labs.services.storm import classroom_traffic_start

    dependency = shared_dependency(args)
    servers, service_ms, max_queue_ms = dependency
    room, scenario = make_class(args, dependency)
    teacher = make_instructor(room)
    policy = "the storm lesson's naive one" if args.storm else args.policy
    if args.storm:
        lesson_students(room, scenario, args.sessions)
    daphne = port = None
    if args.pages:
        daphne, port = start_daphne(bench)
    workers = [
        start_worker(bench, i + 1, args.concurrency, args.profile) for i in range(args.workers)
    ]
    pages = None
    fired = trigger_at = None
    try:
        time.sleep(2)  # the writer processes start beside the workers
        procs = processes(workers, bench, daphne)
        rclient = redis.Redis.from_url(os.environ["REDIS_URL"])
        if args.tiers:  # the bots' sessions (a second of traffic makes them), then the chain
            chained = classroom_simulate(
                classroom=room, students=args.sessions, policy=args.policy, rate=1,
                duration_s=1, arrivals="poisson",
            )  # fmt: skip
            while Traffic.objects.filter(session__classroom=room,
                                         status__in=Traffic.ACTIVE_STATUSES).exists():  # fmt: skip
                time.sleep(0.2)
            JournalEvent.objects.filter(session__classroom=room).delete()
            runtime.shared_model(room.pk).reset()
            classroom_set_chain(classroom=room, user=teacher, values={"tiers": args.tiers})
            if args.pages:
                pages = open_pages(port, chained.sessions, room, teacher, args.pages)
        if args.storm and args.pages:  # the lesson's pages are open before its traffic starts
            sessions = list(LabSession.objects.filter(classroom=room).select_related("owner")
                            .order_by("pk"))  # fmt: skip
            pages = open_pages(port, sessions, room, teacher, args.pages)
        setup_done = timezone.now()  # the runs measured start after it
        cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        own0 = os.times()
        cmd0 = commandstats(rclient)
        reads0 = rclient.info("stats")["total_reads_processed"]
        t0, wall0 = time.monotonic(), time.time()
        if args.storm or args.tiers:  # the instructor starts the traffic on the storm panel
            classroom_traffic_start(classroom=room, user=teacher, rate=args.rate,
                                    duration_s=args.for_s, arrivals="poisson")  # fmt: skip
            trigger_at = min(TRIGGER_AT_S, args.for_s // 3) if args.storm else None
        else:
            sim = classroom_simulate(
                classroom=room, students=args.sessions, policy=args.policy, rate=args.rate,
                duration_s=args.for_s, arrivals="poisson",
            )  # fmt: skip
            if args.pages:
                pages = open_pages(port, sim.sessions, room, teacher, args.pages)
        ids = list(Traffic.objects.filter(session__classroom=room, created_at__gte=setup_done)
                   .values_list("pk", flat=True))  # fmt: skip
        while Traffic.objects.filter(pk__in=ids, status__in=Traffic.ACTIVE_STATUSES).exists():
            if trigger_at is not None and fired is None and time.monotonic() - t0 >= trigger_at:
                fired = classroom_fire_trigger(classroom=room, user=teacher, values=dict(TRIGGER))
                fired["at"] = time.monotonic() - t0
            time.sleep(0.25)
        elapsed = time.monotonic() - t0
        wall1 = time.time()
        cpu1 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        own1 = os.times()
        cmd1 = commandstats(rclient)
        reads1 = rclient.info("stats")["total_reads_processed"]
        if pages is not None:
            time.sleep(PAGES_SETTLE_S)
    finally:
        if pages is not None:
            pages.close()
        for w in workers:  # their writers flush the journal as they stop
            bench.stop(w)
        if daphne is not None:
            bench.stop(daphne)

    runs = list(Traffic.objects.filter(pk__in=ids))
    statuses = Counter(r.status for r in runs)
    rows = JournalEvent.objects.filter(session__classroom=room)
    attempts = list(
        rows.filter(kind="attempt").values_list("t_ms", "created_at", "data", "outcome",
                                                "attempt_no")
    )  # fmt: skip
    n = len(attempts)
    if not n:
        raise SystemExit(f"no attempt was journaled (traffic: {dict(statuses)})")
    per_second = Counter(int(t_ms // 1000) for t_ms, *_ in attempts)
    # The steady seconds: every run's arrivals going (after the last start, before the first
    # run's schedule ends).
    first = int(max(r.started_at for r in runs).timestamp()) + 1
    last = int(min(r.started_at for r in runs).timestamp()) + args.for_s - 1
    steady = [per_second[s] for s in range(first, last)] or [n]
    peak_second, peak = max(per_second.items(), key=lambda item: (item[1], -item[0]))
    span = rows.aggregate(a=Min("created_at"), b=Max("created_at"))
    row_count = rows.count()
    write_span = (span["b"] - span["a"]).total_seconds() or 1.0
    lag = [created.timestamp() * 1000 - t_ms for t_ms, created, *_ in attempts]
    errors = [
        (int(t_ms // 1000), t_ms - d["answer_us"] / 1000)
        for t_ms, _c, d, *_ in attempts
        if d.get("answer_us") is not None
    ]
    err = [e for _, e in errors]
    peak_err = [e for s, e in errors if s == peak_second]
    outcomes = Counter(d.get("outcome") or o for _t, _c, d, o, _a in attempts)  # the model's
    calls = rows.filter(kind="call_result").count()
    counters = runtime.shared_model(room.pk).counters()
    layout = runtime.chain_layout(room.pk) if args.tiers else []
    decided = attempts  # the attempts the shared model decided: the back tier's, in a chain
    if layout:
        back = [s.pk for s in layout[-1]]
        decided = list(
            rows.filter(kind="attempt", session_id__in=back).values_list(
                "t_ms", "created_at", "data", "outcome", "attempt_no"
            )
        )

    print(f"storm_bench: {args.sessions} sessions x {args.rate} calls/s (poisson) for "
          f"{args.for_s} s, policy {policy}, {args.workers} worker process(es); shared "
          f"dependency {servers} servers x {service_ms} ms (capacity "
          f"{servers * 1000 // service_ms}/s), max queue {max_queue_ms} ms; "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    if args.storm:
        print(f"policy ({LESSON.relative_to(ROOT)}): {json.dumps(scenario.script['policy'])}")
        said = (f"fired {fired['at']:.1f} s after the start, {fired['sessions']} sessions "
                "journaled it" if fired else "not fired: the runs ended first")  # fmt: skip
        print(f"storm: a {TRIGGER['kind']} trigger for {TRIGGER['duration_ms'] / 1000:g} s "
              f"on the shared dependency, {said}")  # fmt: skip
        # the class's counters in Redis, each second that has any
        print(f"offered per second: {' '.join(str(s.offered) for s in counters)}")
        print(f"ok per second:      {' '.join(str(s.ok) for s in counters)}")
    if args.pages:
        k = min(args.pages, args.sessions)
        print(f"pages: {k} lab page{'s' if k != 1 else ''} and the storm panel on "
              f"daphne, in this process; lab page reconnects {pages.reconnects()}")  # fmt: skip
    if layout:
        print(f"chain of students: {len(layout)} tiers of "
              f"{', '.join(str(len(t)) for t in layout)} sessions; the front tier's traffic")  # fmt: skip
    print(f"traffic runs: {dict(statuses)}; {calls} calls, {n} attempts "
          f"({', '.join(f'{k} {v}' for k, v in outcomes.most_common())}); "
          f"wall {elapsed:.1f} s")  # fmt: skip
    print()
    print(f"{'attempts/s mean':>16} {'lowest second':>14} {'highest':>8} {'rows/s written':>15} "
          f"{'lag p50 ms':>11} {'lag p99 ms':>11} {'dur err p50':>12} {'p99 ms':>7} "
          f"{'max ms':>7}")  # fmt: skip
    print(f"{sum(steady) / len(steady):>16.1f} {min(steady):>14} {peak:>8} "
          f"{row_count / write_span:>15.1f} {pct(lag, 0.5):>11.1f} {pct(lag, 0.99):>11.1f} "
          f"{pct(err, 0.5):>12.2f} {pct(err, 0.99):>7.2f} {max(err):>7.2f}")  # fmt: skip
    print(f"(the highest second, {peak} attempts: duration error p99 "
          f"{pct(peak_err, 0.99) if peak_err else float('nan'):.2f} ms)")  # fmt: skip
    print()
    delta = cmd1 - cmd0
    scripted = lua_commands()
    usec = Counter({k[5:]: v for k, v in delta.items() if k.startswith("usec:")})
    delta = Counter({k: v for k, v in delta.items() if not k.startswith("usec:")})
    trips = Counter({k: v for k, v in delta.items() if k not in scripted})
    inner = Counter({k: v for k, v in delta.items() if k in scripted})
    # One shared model script per attempt (its offered counter) and per call a breaker
    # refused (a "rejected" row). It calls TIME once each; the TIME left over is the pages'
    # reads (labs.live.runtime.shared_now), sent by daphne.
    decisions = sum(s.offered for s in counters) + rows.filter(kind="rejected").count()
    page_time = max(0, inner["time"] - decisions)
    inner["time"] -= page_time
    trips["time"] += page_time
    scripts = delta["evalsha"] + delta["eval"]
    sent_by = "broker, channel layer, pages" if args.pages else "broker, channel layer"
    print(
        f"Redis round trips per attempt (read events on the server: a command, or a batch of "
        f"them, arriving): {(reads1 - reads0) / n:.2f}"
    )
    print(f"Redis commands per attempt ({sum(trips.values()) / n:.2f} in all):")
    print(f"    {'decision (shared model script)':<44} {decisions / n:>8.3f}")
    print(f"    {'breaker and budget scripts':<44} {(scripts - decisions) / n:>8.3f}")
    for name, count in trips.most_common(6):
        if name not in ("evalsha", "eval"):
            print(f"    {name + f' ({sent_by})':<44} {count / n:>8.3f}")
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
    own = (own1.user - own0.user) + (own1.system - own0.system)
    print(f"{'(not summed: this process)':<32} {own:>8.2f} {1000 * own / n:>11.3f} "
          f"{100 * own / elapsed:>13.1f}%  the page clients and the polling")  # fmt: skip

    if layout:
        chain_table(runtime.chain_now(room.pk, len(layout), now=int(wall1) + 2,
                                      window_s=int(wall1 - wall0) + 4), summed)  # fmt: skip

    # The figures beside their targets.
    equal, differ, undecided = counts_check(decided, counters)
    ends = Counter(rows.filter(kind="traffic_end").values_list("session_id", flat=True))
    journaled = Counter(rows.filter(kind="call_result").values_list("session_id", flat=True))
    made = {r.session_id: int((r.summary or {}).get("finished", -1)) for r in runs}
    short = sum(made[s] != journaled[s] for s in made) + sum(ends[s] != 1 for s in made)
    done = statuses.get(Traffic.Status.DONE, 0)
    table = [
        ("CPU per attempt, every process summed", f"{1000 * summed / n:.3f} ms",
         f"<= {CPU_TARGET_MS} ms", 1000 * summed / n <= CPU_TARGET_MS),
        ("attempt duration error p99, whole run", f"{pct(err, 0.99):.2f} ms",
         f"<= {ERROR_TARGET_MS:g} ms", pct(err, 0.99) <= ERROR_TARGET_MS),
    ]  # fmt: skip
    if pages is not None:
        window = (int(wall0) + 1, int(wall1) - 1)
        for name, series in (
            ("lab pages' per-second figures: delay p99", list(pages.lab.values())),
            ("storm panel's ticks: delay p99", [pages.panel]),
        ):
            got, missing = [], 0
            for arrivals in series:
                d, m = delays(arrivals, *window)
                got += d
                missing += m
            figure = (f"{pct(got, 0.99):.2f} s (p50 {pct(got, 0.5):.2f}, max {max(got):.2f}; "
                      f"{len(got)} seconds, {missing} never came)" if got else "no figures")  # fmt: skip
            ok = bool(got) and pct(got, 0.99) <= DELAY_TARGET_S and not missing
            table.append((name, figure, f"<= {DELAY_TARGET_S:g} s", ok))
    table += [
        ("journal rows = Redis counters, per second and outcome",
         f"{equal} cells equal, {len(differ)} differ, {undecided} rows without a decision",
         "all equal", not differ and not undecided),
        ("nothing lost: runs ended, rows present",
         f"{done} of {len(runs)} runs done; {sum(journaled[s] for s in made)} of "
         f"{sum(max(v, 0) for v in made.values())} calls journaled; {short} session(s) short",
         "all", done == len(runs) == (len(layout[0]) if layout else args.sessions)
         and not short),
    ]  # fmt: skip
    print()
    head = f"{'measure':<54} {'figure':<58} {'target':<11} met"
    print(head)
    print("-" * len(head))
    for name, figure, target, ok in table:
        print(f"{name:<54} {figure:<58} {target:<11} {'yes' if ok else 'NO'}")
    print("(the CPU target is set at 30 sessions x 10 calls/s with 30 pages)")
    for line in differ[:10]:
        print(f"  differs: {line}")


def chain_table(chain: dict, cpu_s: float) -> None:
    """Per tier of a chain of students: calls in, attempts out, their ratio; and the CPU of
    every process per user request (a call entering the front tier)."""
    print()
    print(f"{'tier':<6} {'calls in':>9} {'attempts out':>13} {'per call':>9}")
    for tier in chain["tiers"]:
        calls_in = round(tier["calls_per_s"] * chain["window_s"])
        out = round(tier["attempts_per_s"] * chain["window_s"])
        ratio = f"{tier['amplification']:.2f}" if tier["amplification"] else "-"
        print(f"{tier['tier']:<6} {calls_in:>9} {out:>13} {ratio:>9}")
    requests = chain["requests"]
    if requests:
        print(f"leaf hits per user request {chain['leaf_per_request']}; CPU per user request "
              f"{1000 * cpu_s / requests:.2f} ms, every process summed")  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """Refuses ``--tiers`` beside ``--storm`` (the lesson's students are not a chain), as
    argparse refuses its other options: before anything starts."""

    def parse_args(self, *args, **kwargs):  # type: ignore[override]
        parsed = super().parse_args(*args, **kwargs)
        if parsed.storm and parsed.tiers:
            self.error("argument --tiers: not allowed with argument --storm (the storm "
                       "lesson's students are not a chain)")  # fmt: skip
        return parsed


def parser() -> argparse.ArgumentParser:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int_range(1, 200), default=30, help="1 to 200")
    parser.add_argument("--rate", type=int_range(1, 20), default=10,
                        help="calls/s per session (1 to 20)")  # fmt: skip
    parser.add_argument("--for", dest="for_s", type=int_range(1, 300), default=60,
                        help="seconds (1 to 300)")  # fmt: skip
    parser.add_argument("--workers", type=int_range(1, 16), default=2, help="1 to 16")
    parser.add_argument("--concurrency", type=int_range(1, 512), default=64,
                        help="threads per worker (1 to 512)")  # fmt: skip
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--policy", default="resilient",
                     choices=("naive", "jitter", "budget", "breaker", "resilient", "mixed"))  # fmt: skip
    how.add_argument("--storm", action="store_true",
                     help="the storm lesson: its naive policy, its dependency, and an 8 s down "
                     "trigger during the run")  # fmt: skip
    parser.add_argument(
        "--tiers",
        type=int_range(2, 6),
        default=None,
        help="2 to 6: the bots in a chain of students this deep",
    )
    parser.add_argument("--pages", type=int_range(0, 200), default=0,
                        help="websocket clients through daphne: lab pages, one per session, "
                        "up to this many, and the storm panel (0 to 200; 0: none)")  # fmt: skip
    parser.add_argument("--servers", type=int_range(1, 64), default=None,
                        help="1 to 64 (default 64; --storm: the lesson's load)")  # fmt: skip
    parser.add_argument("--service-ms", type=int_range(1, 2000), default=None,
                        help="1 to 2000 (default 40)")  # fmt: skip
    parser.add_argument("--max-queue-ms", type=int_range(0, 10_000), default=None,
                        help="0 to 10000 (default 1000; --storm: 2000)")  # fmt: skip
    parser.add_argument("--profile", metavar="DIR",
                        help="profile the workers' and writers' threads (CPU time) into DIR "
                        "(benchmarks/cpu_profile; print with its report.py)")  # fmt: skip
    return parser


if __name__ == "__main__":
    run("storm_bench", parser(), measure)
