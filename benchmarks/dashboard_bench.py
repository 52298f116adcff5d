"""The class dashboard under load: server time with a big class, update latency with a busy one.

    .venv/bin/python benchmarks/dashboard_bench.py [--students 100] [--rows 100000]
        [--bursting 100] [--calls 10] [--requests 15]

Uses its own SQLite file (or DATABASE_URL) and its own ``redis-server`` on a free port
(``--shared-redis``: the machine's REDIS_URL, databases ``BENCH_REDIS_DB_BASE``, default 4..7,
flushed), migrates, and prints one table:

(a) server time of ``GET /classes/<id>/dashboard/`` for a class of ``--students`` students with
    ``--rows`` journal rows between them (the Django test client, so it is the view, the one
    query and the template: no network), median and p90 of ``--requests`` requests after two
    warm-ups; the selector alone; and the same with the (session, kind, outcome) index
    dropped, to show what it buys. Target: < 200 ms.
(b) update latency: a real ``daphne`` and ``celery worker`` (the commands of
    lab_project/processes.py), ``--bursting`` sessions of one class starting a burst of
    ``--calls`` calls at the same moment, an instructor's websocket on ``ws/classes/<id>/``
    (a minimal asyncio client, session cookie, the socket the page opens). For every ``session``
    update the client receives, latency = receipt time minus the ``emitted`` stamp of the
    OLDEST engine event the update covers (the worker stamps each event with the wall clock when
    the engine hands it over; the journal row's ``t_ms`` is that same engine time).
    So it includes the journal writer's batching, INSERT and commit, the channel-layer hop,
    the consumer and the websocket write. Target: p99 <= 500 ms.
    The servers run with the deployed settings (DJANGO_DEBUG=false, as docker-compose.yml).
(c) during (b), the real page in headless Chromium (Debian's /usr/bin/chromium; skipped
    without it or with ``--skip-browser``): its long tasks (main-thread work over 50 ms), and
    whether every row's totals equal the journal's once the storm is over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import (  # noqa: E402
    SERVER_ENV,
    Bench,
    collect_static,
    free_port,
    int_range,
    pct,
    run,
)

LOGS = Path(tempfile.gettempdir())


def prepare(bench: Bench, shared_redis: bool = False) -> None:
    """The run's environment (after the arguments are parsed): its own redis-server (with
    ``shared_redis`` or BENCH_REDIS_URL the machine's, databases BENCH_REDIS_DB_BASE, default
    4..7, flushed) and its own SQLite file (or DATABASE_URL). The servers run as deployed
    (bench_common.SERVER_ENV); one secret key here and there, so this process's session
    cookies are valid in daphne."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    bench.redis(shared=shared_redis)
    bench.database("dashboard-bench")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))


def setup_django() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import redis
    from django.conf import settings

    for db in range(settings.REDIS_DB_BASE, settings.REDIS_DB_BASE + 4):
        redis.Redis.from_url(settings.REDIS_URL, db=db).flushdb()


def make_class(name: str, students: int, script: dict):
    """A class with ``students`` students, each with an opened session; returns
    (classroom, instructor, sessions)."""
    from django.contrib.auth import get_user_model

    from labs.models import Classroom, LabSession, Membership, Scenario
    from labs.services.lab import _initial_settings

    user_model = get_user_model()
    room = Classroom.objects.create(name=name)
    scenario = Scenario.objects.create(
        slug=f"bench-{room.pk}", title=f"bench {room.pk}", script=script
    )
    room.scenarios.add(scenario)
    teacher = user_model.objects.create_user(f"teacher-{room.pk}", password=None)
    Membership.objects.create(user=teacher, classroom=room, role=Membership.Role.INSTRUCTOR)
    users = user_model.objects.bulk_create(
        [user_model(username=f"s{room.pk}-{i:03d}") for i in range(students)]
    )
    Membership.objects.bulk_create(
        [Membership(user=u, classroom=room, role=Membership.Role.STUDENT) for u in users]
    )
    dependency, policy, seed = _initial_settings(scenario)
    LabSession.objects.bulk_create(
        [
            LabSession(owner=u, classroom=room, scenario=scenario, dependency=dependency,
                       policy=policy, seed=seed)
            for u in users
        ]
    )  # fmt: skip
    sessions = list(LabSession.objects.filter(classroom=room).order_by("pk"))
    return room, teacher, sessions


# --- (a) server time -----------------------------------------------------------------------------

TOUR = {
    "name": "bench", "seed": 7,
    "dependency": {"mode": "flaky", "fail_count": 3, "latency_ms": 5},
    "policy": {"max_attempts": 4, "backoff_base_ms": 25, "backoff_cap_ms": 500},
    "steps": [{"burst": 6}],
}  # fmt: skip


def fill_journal(sessions, rows: int) -> None:
    """``rows`` journal rows spread over ``sessions``, shaped like real bursts (burst rows with
    summaries, attempts, sleeps, call results, transitions, fast-fails)."""
    from labs.models import Burst, JournalEvent

    rng = random.Random(7)
    per_session = rows // len(sessions)
    events, burst_rows = [], []
    for session in sessions:
        seq, call, number = 1, 1, 0
        while seq <= per_session:
            number += 1
            burst_rows.append(
                Burst(session=session, number=number, size=6, status="done",
                      summary={"calls": 6, "succeeded": 4, "failed": 1, "fast_failed": 1,
                               "attempts_total": 9, "wall_ms": 240.0})
            )  # fmt: skip
            for kind, outcome in [("burst_start", "")] + [
                rng.choice(
                    [("attempt", "ok"), ("attempt", "error"), ("sleep", ""),
                     ("call_result", "success"), ("call_result", "failure"),
                     ("call_result", "rejected_open"), ("transition", "")]
                )
                for _ in range(38)
            ] + [("burst_end", "")]:  # fmt: skip
                if seq > per_session:
                    break
                events.append(
                    JournalEvent(
                        session=session, seq=seq, kind=kind, outcome=outcome,
                        call_no=call, attempt_no=1, t_ms=time.time() * 1000,
                        latency_ms=5.0, message=f"{kind}: an explain sentence for the student",
                        data={"attempts": 4} if kind == "call_result" else {},
                    )
                )  # fmt: skip
                seq += 1
                call += kind == "call_result"
        session.next_seq = seq
    Burst.objects.bulk_create(burst_rows, batch_size=2000)
    JournalEvent.objects.bulk_create(events, batch_size=5000)
    for session in sessions:
        session.save(update_fields=["next_seq"])


def time_requests(client, url: str, n: int) -> list[float]:
    for _ in range(2):
        assert client.get(url).status_code == 200
    times = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
    return times


def server_time_part(args) -> list[tuple[str, str, str, str]]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from labs.selectors.dashboard import class_dashboard_rows

    setup_test_environment()
    room, teacher, sessions = make_class("bench big class", args.students, TOUR)
    fill_journal(sessions, args.rows)
    if connection.vendor == "postgresql":
        # What autovacuum does to a table soon after a bulk load: statistics for the planner
        # and the visibility map that lets the counts be index-only scans.
        with connection.cursor() as cursor:
            for table in ("labs_journalevent", "labs_burst", "labs_labsession"):
                cursor.execute(f"VACUUM ANALYZE {table}")
    client = Client()
    client.force_login(teacher)
    url = f"/classes/{room.pk}/dashboard/"
    page = time_requests(client, url, args.requests)
    selector = []
    for _ in range(args.requests):
        start = time.perf_counter()
        class_dashboard_rows(classroom_id=room.pk)
        selector.append((time.perf_counter() - start) * 1000)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX journal_session_kind_outcome")
    unindexed = time_requests(client, url, args.requests)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE INDEX journal_session_kind_outcome ON labs_journalevent "
            "(session_id, kind, outcome)"
        )
    what = f"{args.students} students, {args.rows:,} journal rows"
    return [
        ("(a) dashboard GET, server time", what,
         f"median {statistics.median(page):.1f} ms, p90 {pct(page, 0.9):.1f} ms", "< 200 ms"),
        ("    the one query alone", what, f"median {statistics.median(selector):.1f} ms", ""),
        ("    GET without the (session, kind, outcome) index", what,
         f"median {statistics.median(unindexed):.1f} ms, p90 {pct(unindexed, 0.9):.1f} ms",
         "(comparison)"),
    ]  # fmt: skip


# --- (b) update latency ------------------------------------------------------------------------


def start(bench: Bench, cmd: list[str], name: str, ready) -> subprocess.Popen:
    """Start a server process (the run's :class:`Bench` stops it however the run ends);
    ``ready()`` says when it is up (90 s at most)."""
    env = dict(os.environ) | SERVER_ENV
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env["PYTHONUNBUFFERED"] = "1"
    log = LOGS / f"failurelab-dashboard-bench-{name}-{os.getpid()}.log"
    proc = bench.start(name, cmd, env=env, log=log)
    bench.wait_ready(proc, name, lambda: ready(log), str(log))
    return proc


def answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2):
            return True
    except OSError:
        return False


class MiniSocket:
    """A minimal asyncio websocket client (RFC 6455: text frames, ping -> pong, close).

    Not autobahn's asyncio client: daphne is an installed app, so Django's setup imports
    autobahn for Twisted first and txaio then refuses asyncio in this process.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str, headers: dict[str, str]):
        import base64

        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
                 *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = await reader.readline()
        if b" 101 " not in status:
            raise SystemExit(f"websocket refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        return cls(reader, writer)

    async def receive(self) -> str | None:
        """The next text message (None once the server closes)."""
        import struct

        while True:
            head = await self.reader.readexactly(2)
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(length)
            if opcode == 0x1:
                return payload.decode()
            if opcode == 0x8:
                return None
            if opcode == 0x9:  # ping: answer with a masked pong
                mask = os.urandom(4)
                body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                self.writer.write(bytes([0x8A, 0x80 | len(payload)]) + mask + body)

    def close(self) -> None:
        self.writer.close()


def engine_times(session_ids: list[int]) -> dict[tuple[int, int], tuple[float, float]]:
    """(session, seq) -> (engine time, time the writer stamped the row just before its INSERT),
    epoch seconds, for the engine's events (rows written by request code, such as
    burst_queued, have no engine time)."""
    from django.db import connections

    from labs.models import JournalEvent

    rows = JournalEvent.objects.filter(session_id__in=session_ids, t_ms__gt=0).values_list(
        "session_id", "seq", "t_ms", "created_at"
    )
    times = {(sid, seq): (t_ms / 1000, at.timestamp()) for sid, seq, t_ms, at in rows.iterator()}
    connections.close_all()
    return times


async def watch(args, port: int, cookie: str, room, sessions, start_bursts) -> dict:
    """Connect the dashboard socket, start the bursts, collect every update."""
    received: list[tuple[float, dict]] = []
    socket = await MiniSocket.connect(
        "127.0.0.1", port, f"/ws/classes/{room.pk}/",
        {"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"},
    )  # fmt: skip
    snapshot = json.loads(await asyncio.wait_for(socket.receive(), 30))
    assert snapshot["type"] == "snapshot", snapshot

    snapshots: list[dict] = []

    async def read_dashboard():
        while (text := await socket.receive()) is not None:
            now = time.time()
            message = json.loads(text)
            if message["type"] == "session":
                received.append((now, message))
            elif message["type"] == "snapshot":  # the consumer's settle snapshot
                snapshots.append(message)

    dashboard = asyncio.create_task(read_dashboard())

    last_seq = {s["session"]: s["last_seq"] for s in snapshot["rows"]}
    started = time.time()
    await asyncio.to_thread(start_bursts)
    idle: set[int] = set()
    deadline = time.monotonic() + 120
    while len(idle) < len(sessions) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        idle = {m["session"] for _, m in received if m.get("activity") == "idle"}
        if snapshots:  # an update the channel layer dropped is healed by the next snapshot
            idle |= {
                r["session"]
                for r in snapshots[-1]["rows"]
                if r["activity"] == "idle" and r["last_seq"] > last_seq.get(r["session"], 0)
            }
    wall = time.time() - started
    await asyncio.sleep(0.5)  # the last updates
    dashboard.cancel()
    socket.close()

    # The engine's time of every event, from the journal: t_ms is the wall clock (ms) when
    # the engine emitted it, the same moment as the pushed payloads' "emitted" stamp.
    emitted = await asyncio.to_thread(engine_times, [s.pk for s in sessions])
    latencies, newest, queued, unstamped = [], [], [], 0
    for receipt, message in sorted(received, key=lambda r: r[1]["last_seq"]):
        session_id = message["session"]
        first = last_seq.get(session_id, 0) + 1
        pairs = [
            emitted[(session_id, seq)]
            for seq in range(first, message["last_seq"] + 1)
            if (session_id, seq) in emitted
        ]
        stamps = [engine for engine, _ in pairs]
        if pairs:
            oldest, written = min(pairs)
            queued.append((written - oldest) * 1000)
        last_seq[session_id] = max(last_seq.get(session_id, 0), message["last_seq"])
        if stamps:
            latencies.append((receipt - min(stamps)) * 1000)
            newest.append((receipt - max(stamps)) * 1000)
        else:
            unstamped += 1  # rows written by request code (burst_queued): no engine stamp
    calls = {}
    for _, message in received:
        calls[message["session"]] = calls.get(message["session"], 0) + message["calls"]
    short = sum(1 for s in sessions if calls.get(s.pk, 0) < args.calls)
    return {
        "short": short,
        "latencies": latencies,
        "newest": newest,
        "queued": queued,
        "updates": len(received),
        "unstamped": unstamped,
        "idle": len(idle),
        "wall": wall,
        "events": len(emitted),
    }


LONG_TASKS_JS = """
window.__longTasks = [];
new PerformanceObserver(list => list.getEntries().forEach(e => window.__longTasks.push(e.duration)))
  .observe({type: "longtask", buffered: true});
"""


class BrowserWatch:
    """The real dashboard page in headless Chromium during the storm (its own thread: the
    Playwright sync API runs an event loop of its own). Afterwards it reads the page's long
    tasks (main-thread work over 50 ms: what "melting the browser" looks like) and the totals
    each row shows, for comparison with the journal."""

    CHROMIUM = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
    ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

    def __init__(self, url: str, cookie: str, port: int) -> None:
        import threading

        self.url, self.cookie, self.port = url, cookie, port
        self.ready, self.done, self.finished = (threading.Event() for _ in range(3))
        self.result: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=self.CHROMIUM, headless=True, args=self.ARGS
                )
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_cookies([{"name": "sessionid", "value": self.cookie,
                                      "domain": "127.0.0.1", "path": "/"}])  # fmt: skip
                page = context.new_page()
                page.add_init_script(LONG_TASKS_JS)
                page.goto(self.url)
                page.wait_for_selector('#live-status[data-state="live"]', timeout=30_000)
                self.ready.set()
                self.done.wait(300)
                time.sleep(1.0)  # the last frames
                self.result = page.evaluate(
                    """() => ({
                        long: window.__longTasks,
                        stats: window.failureLabDashboard.stats,
                        rows: Array.from(document.querySelectorAll('#dash-rows tr')).map(r => [
                          Number(r.dataset.session),
                          ...['calls', 'attempts_total', 'fast_failed'].map(
                            f => Number(r.querySelector('[data-field=' + f + ']').textContent))]),
                    })"""
                )
                browser.close()
        except Exception as exc:  # reported in the table, never fatal for (b)
            self.result = {"error": repr(exc)}
            self.ready.set()
        finally:
            self.finished.set()


def latency_part(args, bench: Bench) -> list[tuple[str, str, str, str]]:
    from django.test import Client

    from lab_project.processes import daphne_cmd, worker_cmd
    from labs.models import Burst
    from labs.services.bursts import burst_start

    script = {
        "name": "bench-live", "seed": 7,
        "dependency": {"mode": "flaky", "fail_count": 3, "latency_ms": 50},
        "policy": {"max_attempts": 4, "backoff_base_ms": 25, "backoff_cap_ms": 500,
                   "breaker": {"kind": "consecutive", "failure_threshold": 3}},
        "steps": [{"burst": args.calls}],
    }  # fmt: skip
    room, teacher, sessions = make_class("bench busy class", args.bursting, script)
    client = Client()
    client.force_login(teacher)
    cookie = client.cookies["sessionid"].value
    port = free_port()
    collect_static(dict(os.environ) | SERVER_ENV)
    worker = start(
        bench,
        [*worker_cmd(128), "--without-heartbeat", "--without-gossip", "--without-mingle",
         "-n", f"dashboard-bench-{os.getpid()}@%h"],
        "worker", lambda log: b"ready." in log.read_bytes(),
    )  # fmt: skip
    daphne = None
    try:
        daphne = start(bench, daphne_cmd("127.0.0.1", port), "daphne", lambda log: answers(port))
        # Warm the worker's journal writer up (it may start a process on first use).
        warm = burst_start(session=sessions[0], user=sessions[0].owner, size=1)
        deadline = time.monotonic() + 60
        while Burst.objects.get(pk=warm.pk).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)

        def start_bursts():
            from django.db import connections

            for session in sessions:
                burst_start(session=session, user=session.owner, size=args.calls)
            connections.close_all()

        browser = None
        if not args.skip_browser and Path(BrowserWatch.CHROMIUM).exists():
            browser = BrowserWatch(f"http://127.0.0.1:{port}/classes/{room.pk}/dashboard/",
                                   cookie, port)  # fmt: skip
            browser.ready.wait(90)
        result = asyncio.run(watch(args, port, cookie, room, sessions, start_bursts))
        if browser is not None:
            browser.done.set()
            browser.finished.wait(60)
    finally:
        if daphne is not None:
            bench.stop(daphne)
        bench.stop(worker)
    lat = result["latencies"]
    what = f"{args.bursting} sessions x {args.calls} calls at once"
    rows = [
        ("(b) update latency, emit -> dashboard socket", what,
         f"p50 {pct(lat, 0.5):.0f} ms, p99 {pct(lat, 0.99):.0f} ms, max {max(lat):.0f} ms",
         "p99 <= 500 ms"),
        ("    the same, newest event of each update", what,
         f"p50 {pct(result['newest'], 0.5):.0f} ms, p99 {pct(result['newest'], 0.99):.0f} ms "
         "(the difference is time spent waiting for the writer's batch)", ""),
        ("    of which emit -> row written (worker side)", what,
         f"p50 {pct(result['queued'], 0.5):.0f} ms, p99 {pct(result['queued'], 0.99):.0f} ms "
         "(the rest: commit, channel layer, daphne, websocket)", ""),
        ("    updates received / engine events", what,
         f"{result['updates']} updates for {result['events']} engine events "
         f"({result['events'] / max(1, result['updates']):.1f} per update; "
         f"{result['unstamped']} updates of request-code rows only, not in the latency); "
         f"{result['idle']}/{args.bursting} sessions back to idle in {result['wall']:.1f} s; "
         f"{result['short']} sessions missed an update (pub/sub delivers at most once; the "
         "settle snapshot corrects them)",
         ""),
    ]  # fmt: skip
    if browser is not None:
        rows.append(browser_row(browser.result, room, what))
    return rows


def browser_row(result: dict, room, what: str) -> tuple[str, str, str, str]:
    from labs.selectors.dashboard import class_dashboard_rows

    label = "(c) the page in Chromium during (b)"
    if "error" in result:
        return (label, what, f"not measured: {result['error']}", "")
    truth = {
        r.session_id: (r.calls, r.attempts_total, r.fast_failed)
        for r in class_dashboard_rows(classroom_id=room.pk)
    }
    shown = {row[0]: tuple(row[1:]) for row in result["rows"]}
    exact = sum(1 for sid, totals in truth.items() if shown.get(sid) == totals)
    long, stats = result["long"], result["stats"]
    return (
        label, what,
        f"{stats['messages']} updates painted in {stats['frames']} frames, JS "
        f"{stats['flushMs']:.0f} ms in all (max {stats['maxFlushMs']:.1f} ms a frame); "
        f"long tasks {len(long)}, max {max(long, default=0):.0f} ms; "
        f"rows equal to the journal: {exact}/{len(truth)}",
        "rows exact",
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int_range(1, 10_000), default=100, help="1 to 10,000")
    parser.add_argument("--rows", type=int_range(0, 10_000_000), default=100_000,
                        help="journal rows, 0 to 10,000,000")  # fmt: skip
    parser.add_argument("--requests", type=int_range(1, 1000), default=15, help="1 to 1,000")
    parser.add_argument("--bursting", type=int_range(1, 500), default=100, help="1 to 500")
    parser.add_argument("--calls", type=int_range(1, 20), default=10, help="1 to 20")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-browser", action="store_true", help="no Chromium in (b)")
    parser.add_argument(
        "--shared-redis", action="store_true", help="use REDIS_URL, not a private redis-server"
    )
    return parser


def measure(args, bench: Bench) -> None:
    prepare(bench, args.shared_redis)
    setup_django()
    from django.db import connection

    load_before = os.getloadavg()[0]
    rows = server_time_part(args)
    if not args.skip_latency:
        rows += latency_part(args, bench)
    # The machine may be shared: the load average says how much else wanted the CPUs.
    print(
        f"\ndashboard bench ({connection.vendor}, {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after)"
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("measure", "load", "result", "target")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    run("dashboard_bench", parser(), measure)
