"""Event-to-browser latency of the live lab page, through a real daphne, worker and Redis.

    .venv/bin/python benchmarks/push_bench.py [--sessions 1,30,100] [--calls 20]

Starts its own ``daphne`` and ``celery worker`` (the commands of lab_project/processes.py, the
ones ``make run`` uses) on its own SQLite file (or DATABASE_URL) and its own ``redis-server`` on
a free port (``--shared-redis``: the machine's REDIS_URL, databases ``BENCH_REDIS_DB_BASE``,
default 4..7; or ``BENCH_REDIS_URL``), migrates, creates one student and one lab session per simulated
browser, logs each in with a real session cookie and opens the page's websocket
(``ws/sessions/<id>/``) with the ``websockets`` client, exactly as the lab page
(static/js/lab/socket.js) does.

Latency is measured per journal event: from the ``emitted`` stamp the worker puts on each engine
event (wall clock, when the engine hands it over) to the moment the client has the websocket
frame parsed (same machine, same clock). It therefore includes the journal writer's batch
INSERT and commit, the channel-layer hop through Redis, the consumer rendering the row and the
websocket write.

The servers run with the deployed settings (``DJANGO_DEBUG=false``, as docker-compose.yml);
``--debug`` runs them with the development ones. The clients run in this process, on the same
2 cores as the servers: on a real class they are thirty browsers on thirty laptops, so these
figures include load a real server never carries. ``--layer`` adds a channel-layer listener
here too (the "layer" columns: the latency before daphne), at the cost of more of that load.

``--web N`` starts N daphne processes on one shared listening socket instead of one, as
``LAB_WEB_PROCESSES=N make run`` does; the CPU table lists each.

One untimed burst first warms the servers up (connections opened and code run for the first
time; the worker itself only takes tasks once its journal writer has booted).

Rows printed:

- one session bursting, N rounds of one burst;
- 30 and 100 sessions starting a burst at the same moment, N rounds: each page presses Run
  burst as the lab page does while its socket is live, a ``run_burst`` message over it
  (``--click post``: an htmx POST of the form to daphne, the way without a live socket, from
  a thread per page released together by a barrier);
- catch-up: 30 sessions bursting while half of the clients drop their socket mid-burst and
  reconnect with ``?after=<last seq>``: events lost (journal rows the client never got) and
  duplicates (rows it got twice), which must both be 0.

Targets: p99 <= 25 ms for one session, <= 250 ms for 30 and 100 sessions, 0 lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

BENCH_SCRIPT = {
    "name": "push-bench",
    "seed": 11,
    # Some attempts fail, so a burst has attempts, backoff sleeps and call results to push.
    "dependency": {"mode": "error_rate", "rate": 0.3, "latency_ms": 5},
    "policy": {
        "max_attempts": 4,
        "backoff_base_ms": 10,
        "backoff_cap_ms": 100,
        "jitter": "none",
        "breaker": {"kind": "consecutive", "failure_threshold": 20, "cooldown_ms": 100},
    },
    "steps": [{"burst": 20}],
}


# --- setup --------------------------------------------------------------------------------


def prepare(bench: Bench, shared_redis: bool = False) -> None:
    """The run's environment (after the arguments are parsed): its own redis-server (with
    ``shared_redis`` or BENCH_REDIS_URL the machine's, databases BENCH_REDIS_DB_BASE, default
    4..7) and its own SQLite file (or DATABASE_URL), one secret key for this process and the
    servers it starts: the session cookies made here must be valid there."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    bench.redis(shared=shared_redis)
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    bench.database("push-bench")


def setup_django() -> None:
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.core.management import call_command

    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(settings.REDIS_URL).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    call_command("migrate", verbosity=0)
    if "LAB_SQLITE_PATH" not in os.environ:
        call_command("flush", interactive=False, verbosity=0)  # a bench database, emptied
    for db in range(settings.REDIS_DB_BASE, settings.REDIS_DB_BASE + 4):
        redis.Redis.from_url(settings.REDIS_URL, db=db).flushdb()


def process_env(debug: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["LAB_LOG_LEVEL"] = "WARNING"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if not debug:  # as deployed (bench_common.SERVER_ENV); --debug: the development settings
        env.update(SERVER_ENV)
    return env


def start_web(
    bench: Bench, port: int, logdir: Path, env: dict[str, str], web: int = 1
) -> list[tuple[str, subprocess.Popen]]:
    """The web processes as ``make run`` starts them, each with its log in ``logdir``: one
    ``daphne`` on ``port``, or ``web`` of them accepting on one shared listening socket
    (``LAB_WEB_PROCESSES``). Returns (name, process) each; :func:`web_answers` says when
    they serve."""
    from lab_project.processes import daphne_cmd, daphne_fd_cmd, shared_listener

    commands = []
    listener = None
    if web == 1:
        cmd = daphne_cmd("127.0.0.1", port)
        if os.environ.get("BENCH_PROFILE_DAPHNE"):  # where the web process spends its CPU
            cmd = [sys.executable, "-m", "cProfile", "-o", os.environ["BENCH_PROFILE_DAPHNE"],
                   "-m", "daphne", *cmd[1:]]  # fmt: skip
        commands.append(("daphne", cmd, ()))
    else:
        # Several web processes accept on one listening socket, as make run starts them
        # with LAB_WEB_PROCESSES: a page's websocket and its POSTs may land on different
        # processes, as behind any load balancer.
        listener = shared_listener("127.0.0.1", port)
        fd = listener.fileno()
        commands += [(f"daphne{i + 1}", daphne_fd_cmd(fd), (fd,)) for i in range(web)]
    started = [
        (name, bench.start(name, cmd, env=env, log=logdir / f"{name}.log", pass_fds=fds))
        for name, cmd, fds in commands
    ]
    if listener is not None:
        listener.close()  # the web processes hold it
    return started


def web_answers(port: int) -> bool:
    """Whether the web process on ``port`` serves the login page."""
    import urllib.request

    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/accounts/login/", timeout=2
        ) as response:
            return response.status == 200
    except OSError:
        return False


class Processes:
    """daphne and one worker, started by the run's :class:`Bench` (which stops their whole
    process groups however the run ends)."""

    def __init__(
        self,
        bench: Bench,
        port: int,
        concurrency: int,
        logdir: Path,
        debug: bool = False,
        web: int = 1,
    ) -> None:
        from lab_project.processes import worker_cmd

        self.bench = bench
        self.logdir = logdir
        env = process_env(debug)
        if not debug:
            collect_static(env)
        started = start_web(bench, port, logdir, env, web)
        self.names = [name for name, _ in started]
        self.procs = [proc for _, proc in started]
        self.names.append("worker")
        self.procs.append(
            bench.start("worker", [*worker_cmd(concurrency), "-n", f"push-bench-{os.getpid()}@%h"],
                        env=env, log=logdir / "worker.log")
        )  # fmt: skip
        self._wait_ready(port)

    def _wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    sys.exit(f"a server exited early; see {self.logdir}")
            worker_ready = b"ready." in (self.logdir / "worker.log").read_bytes()
            if worker_ready and web_answers(port):
                return
            time.sleep(0.2)
        sys.exit(f"daphne or the worker did not start in 60 s; see {self.logdir}")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by each server's whole process group (the worker's journal
        writer process included), the private redis-server and this process."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, proc in zip(self.names, self.procs, strict=True):
            total = 0
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == proc.pid:  # process group id
                    total += int(fields[11]) + int(fields[12])
            out[name] = total / tick
        if self.bench.redis_proc is not None:
            fields = Path(f"/proc/{self.bench.redis_proc.pid}/stat").read_text().rsplit(")", 1)[1]
            out["redis"] = sum(int(f) for f in fields.split()[11:13]) / tick
        usage = os.times()
        out["clients"] = usage.user + usage.system  # this process: the simulated browsers
        return out

    def worker_detail(self) -> dict[str, float]:
        """CPU seconds so far of the worker's parts: its engine hub thread, its main thread
        (Celery's consumer: receiving and acknowledging tasks), its other threads (the burst
        threads' bookkeeping, the journal pipe, heartbeats) and its journal-writer process."""
        tick = os.sysconf("SC_CLK_TCK")
        worker = self.procs[self.names.index("worker")].pid
        out = {"hub": 0.0, "celery main": 0.0, "other threads": 0.0, "writer": 0.0}
        for task in Path(f"/proc/{worker}/task").glob("[0-9]*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                name = (task / "comm").read_text().strip()
            except OSError:
                continue
            used = (int(fields[11]) + int(fields[12])) / tick
            if name == "engine-hub":
                out["hub"] += used
            elif task.name == str(worker):
                out["celery main"] += used
            else:
                out["other threads"] += used
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == worker:  # the writer process, the worker's child
                out["writer"] += (int(fields[11]) + int(fields[12])) / tick
        return out

    def stop(self) -> None:
        for proc in self.procs:
            self.bench.stop(proc)


def session_cookie(user) -> str:
    """A Django session logging ``user`` in (saved in the session store, no password needed),
    as the login form would leave it: its key, the ``sessionid`` cookie's value."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    web = import_module(settings.SESSION_ENGINE).SessionStore()
    web[SESSION_KEY] = str(user.pk)
    web[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    web[HASH_SESSION_KEY] = user.get_session_auth_hash()
    web.save()
    return web.session_key


def make_sessions(count: int) -> list[tuple[int, str]]:
    """``count`` students, each with a lab session; (session id, session cookie) each."""
    from django.contrib.auth import get_user_model

    from labs.models import Classroom, Membership, Scenario
    from labs.services.lab import session_open

    scenario = Scenario.objects.create(slug="push-bench", title="Push bench", script=BENCH_SCRIPT)
    room = Classroom.objects.create(name="Push bench")
    room.scenarios.add(scenario)
    out = []
    for i in range(count):
        user = get_user_model()(username=f"bench{i:03d}")
        user.set_unusable_password()  # logged in below with a session, no hashing needed
        user.save()
        Membership.objects.create(user=user, classroom=room, role="student")
        lab_session = session_open(user=user, classroom=room, scenario=scenario)
        out.append((lab_session.pk, session_cookie(user)))
    return out


# --- the simulated browsers -------------------------------------------------------------------


@dataclass
class Browser:
    """One page's websocket: remembers every seq it got and the latency of live events.

    By default the lab page's socket of ``session_id``; ``path`` names another page's
    (``ws/classes/<id>/storm/``), opened as it is. ``on_message(message, received)`` sees
    every message with its receipt time (``time.time()``, once the frame is parsed)."""

    session_id: int
    cookie: str
    port: int
    path: str = ""
    on_message: Callable[[dict[str, Any], float], None] | None = None
    last_seq: int = 0
    seqs: list[int] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    stop: bool = False
    ws: Any = None
    #: Run burst clicks sent over the socket, by id: (when answered, the reply) once answered
    asks: dict[int, asyncio.Future] = field(default_factory=dict)

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        while not self.stop:
            url = f"ws://127.0.0.1:{self.port}/" + (
                self.path or f"ws/sessions/{self.session_id}/?after={self.last_seq}"
            )
            try:
                async with connect(
                    url,
                    origin=f"http://127.0.0.1:{self.port}",
                    additional_headers={"Cookie": f"sessionid={self.cookie}"},
                    max_size=None,
                    ping_interval=None,
                ) as ws:
                    self.ws = ws
                    async for raw in ws:
                        received = time.time()
                        message = json.loads(raw)
                        if self.on_message is not None:
                            self.on_message(message, received)
                        if message["type"] in ("state", "snapshot"):  # lab page, storm panel
                            self.connected.set()
                        elif message["type"] == "burst_reply":
                            ask = self.asks.pop(message.get("id"), None)
                            if ask is not None and not ask.done():
                                ask.set_result((time.monotonic(), message))
                        elif message["type"] == "events":
                            for event in message["events"]:
                                self.seqs.append(event["seq"])
                                self.last_seq = max(self.last_seq, event["seq"])
                                if event.get("emitted"):
                                    self.latencies_ms.append((received - event["emitted"]) * 1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reconnect like the page does
                if not self.stop:
                    print(f"  session {self.session_id}: socket error {exc!r}; reconnecting")
            self.ws = None
            self.connected.clear()
            await asyncio.sleep(0.05)

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def drop(self) -> None:
        """Lose the connection (as a page going offline does) and come back."""
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.connected.clear()
        await asyncio.sleep(random.uniform(0.1, 0.4))
        self.start()

    async def close(self) -> None:
        self.stop = True
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def layer_probe(session_ids: list[int], out: list[float]) -> None:
    """Listen to the sessions' groups on the channel layer itself (no daphne): the part of
    the latency spent before the consumer, in the worker's journal writer and Redis."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    for sid in session_ids:
        await layer.group_add(f"lab-session-{sid}", channel)
    try:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: S112 - an idle blocking read timing out; listen again
                continue
            received = time.time()
            for event in message.get("events", []):
                if event.get("emitted"):
                    out.append((received - event["emitted"]) * 1000)
    finally:
        for sid in session_ids:
            with contextlib.suppress(Exception):
                await layer.group_discard(f"lab-session-{sid}", channel)


#: How long each Run burst request took (barrier release to response), per scenario.
POST_TIMES: dict[str, list[float]] = {}


def start_bursts(browsers: list[Browser], calls: int, times: list[float] | None = None) -> None:
    """Press Run burst on every page at (nearly) the same moment: one htmx POST per session
    to daphne from its own thread, with the session cookie and a CSRF token, as the page
    sends it. The views run in daphne, as they do for a real class."""
    import http.client
    import string
    from urllib.parse import urlencode

    token = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
    barrier = threading.Barrier(len(browsers))
    failures: list[str] = []

    def press(browser: Browser) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", browser.port, timeout=60)
        try:
            conn.connect()
            barrier.wait()
            started = time.monotonic()
            conn.request(
                "POST",
                f"/sessions/{browser.session_id}/bursts/",
                body=urlencode({"size": calls, "concurrency": 1}),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": f"sessionid={browser.cookie}; csrftoken={token}",
                    "X-CSRFToken": token,
                    "HX-Request": "true",
                    # As htmx sends a click in the burst form: the form's id.
                    "HX-Trigger": "burst-form",
                    "HX-Target": "burst-form",
                    "Origin": f"http://127.0.0.1:{browser.port}",
                },
            )
            response = conn.getresponse()
            response.read()
            if times is not None:
                times.append((time.monotonic() - started) * 1000)
            if response.status != 200:
                failures.append(f"session {browser.session_id}: HTTP {response.status}")
        finally:
            conn.close()

    threads = [threading.Thread(target=press, args=(b,)) for b in browsers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        sys.exit("Run burst was refused: " + "; ".join(failures[:5]))


async def socket_clicks(browsers: list[Browser], calls: int, times: list[float] | None) -> None:
    """Press Run burst on every page at the same moment as the lab page does with a live socket:
    one ``run_burst`` message each, all sent at once; each click's time runs from that
    moment to its ``burst_reply``."""
    loop = asyncio.get_running_loop()
    asks = []
    started = time.monotonic()
    for n, browser in enumerate(browsers, 1):
        ask = loop.create_future()
        browser.asks[n] = ask
        await browser.ws.send(
            json.dumps({"type": "run_burst", "id": n, "size": calls, "concurrency": 1})
        )
        asks.append(ask)
    replies = await asyncio.wait_for(asyncio.gather(*asks), 120)
    refused = [m for _, m in replies if m.get("status") != 200]
    if refused:
        sys.exit(f"Run burst was refused: {refused[:3]}")
    if times is not None:
        times.extend((at - started) * 1000 for at, _ in replies)


def journal_seqs(session_ids: list[int]) -> dict[int, list[int]]:
    from labs.models import JournalEvent

    out: dict[int, list[int]] = {sid: [] for sid in session_ids}
    for sid, seq in JournalEvent.objects.filter(session_id__in=session_ids).values_list(
        "session_id", "seq"
    ):
        out[sid].append(seq)
    return out


def bursts_active(session_ids: list[int]) -> int:
    from labs.models import Burst

    return Burst.objects.filter(
        session_id__in=session_ids, status__in=["queued", "running"]
    ).count()


async def run_scenario(
    sessions: list[tuple[int, str]],
    port: int,
    rounds: int,
    calls: int,
    drop_half: bool = False,
    probe_layer: bool = False,
    post_times: list[float] | None = None,
    click: str = "socket",
) -> tuple[list[float], list[float], int, int, int]:
    """Bursts in every session at once, ``rounds`` times; returns (latencies to the browser,
    latencies to the channel layer, events, lost, duplicates)."""
    browsers = [Browser(sid, cookie, port) for sid, cookie in sessions]
    ids = [b.session_id for b in browsers]
    layer_latencies: list[float] = []
    probe = asyncio.ensure_future(layer_probe(ids, layer_latencies)) if probe_layer else None
    baseline = await asyncio.to_thread(journal_seqs, ids)
    for b in browsers:
        b.last_seq = max(baseline[b.session_id], default=0)
        b.start()
    await asyncio.wait_for(asyncio.gather(*(b.connected.wait() for b in browsers)), 60)
    for _ in range(rounds):
        if click == "socket":
            await socket_clicks(browsers, calls, post_times)
        else:
            await asyncio.to_thread(start_bursts, browsers, calls, post_times)
        if drop_half:
            await asyncio.sleep(0.15)  # mid-burst
            await asyncio.gather(*(b.drop() for b in browsers[: len(browsers) // 2]))
        deadline = time.monotonic() + 120
        while await asyncio.to_thread(bursts_active, ids):
            if time.monotonic() > deadline:
                sys.exit("bursts did not finish in 120 s; is the worker running?")
            await asyncio.sleep(0.1)
        # every page catches up with the journal (or the wait times out: losses counted below)
        final = await asyncio.to_thread(journal_seqs, ids)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            b.last_seq < max(final[b.session_id], default=0) for b in browsers
        ):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    final = await asyncio.to_thread(journal_seqs, ids)
    lost = duplicates = 0
    for b in browsers:
        expected = {s for s in final[b.session_id] if s not in baseline[b.session_id]}
        got = Counter(b.seqs)
        lost += len(expected - set(got))
        duplicates += sum(n - 1 for n in got.values() if n > 1)
    latencies = [ms for b in browsers for ms in b.latencies_ms]
    events = sum(len(b.seqs) for b in browsers)
    await asyncio.gather(*(b.close() for b in browsers))
    if probe is not None:
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe
    return latencies, layer_latencies, events, lost, duplicates


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=session_counts, default="1,30,100",
                        help="comma-separated session counts, each 1 to 500")  # fmt: skip
    parser.add_argument("--calls", type=int_range(1, 20), default=20,
                        help="calls per burst (1 to 20)")  # fmt: skip
    parser.add_argument("--rounds", type=int_range(0, 1000), default=0,
                        help="bursts per session (0: auto)")  # fmt: skip
    parser.add_argument("--port", type=int_range(0, 65535), default=0,
                        help="daphne port (0: a free one)")  # fmt: skip
    parser.add_argument("--click", choices=("socket", "post"), default="socket",
                        help="how the pages press Run burst (default: over the socket)")  # fmt: skip
    parser.add_argument("--web", type=int_range(1, 8), default=1,
                        help="web (daphne) processes sharing the port (1 to 8, default 1)")  # fmt: skip
    parser.add_argument("--worker-concurrency", type=int_range(1, 1024), default=128)
    parser.add_argument(
        "--shared-redis", action="store_true", help="use REDIS_URL, not a private redis-server"
    )
    parser.add_argument(
        "--debug", action="store_true", help="run the servers with DJANGO_DEBUG=true"
    )
    parser.add_argument(
        "--layer",
        action="store_true",
        help="also time arrival on the channel layer (a listener in this process: it adds its "
        "own load to the clients' event loop)",
    )
    return parser


def session_counts(text: str) -> list[int]:
    """``--sessions``: comma-separated whole numbers, each 1 to 500."""
    parse = int_range(1, 500)
    counts = [parse(c.strip()) for c in text.split(",") if c.strip()]
    if not counts:
        raise argparse.ArgumentTypeError("must name at least one session count")
    return counts


def measure(args, bench: Bench) -> None:
    counts = args.sessions
    prepare(bench, args.shared_redis)
    setup_django()
    from django.conf import settings
    from django.db import connection

    port = args.port or free_port()
    logdir = Path(tempfile.mkdtemp(prefix="push-bench-"))
    all_sessions = make_sessions(max([*counts, 30]) + 1)
    warmup = all_sessions.pop()
    connection.close()
    db = "SQLite" if "sqlite" in settings.DATABASES["default"]["ENGINE"] else "PostgreSQL"
    print(
        f"push_bench: {db}, Redis {'private ' if bench.redis_proc else ''}{settings.REDIS_URL} "
        f"dbs {settings.REDIS_DB_BASE}..{settings.REDIS_DB_BASE + 3}, "
        f"journal writer {getattr(settings, 'LAB_JOURNAL_WRITER', 'thread')}, "
        f"{args.calls} calls per burst, servers with DJANGO_DEBUG={str(args.debug).lower()}, "
        f"{os.cpu_count()} CPUs; logs in {logdir}"
    )
    procs = Processes(
        bench, port, args.worker_concurrency, logdir, debug=args.debug, web=args.web
    )
    rows = []
    usage: list[str] = []
    details: list[str] = []
    try:
        # Untimed: the first burst after a worker starts waits for its journal writer to
        # warm up (about a second of delayed pushes), which is not what this measures.
        asyncio.run(run_scenario([warmup], port, 1, args.calls))
        for count in counts:
            rounds = args.rounds or (10 if count == 1 else 3 if count <= 30 else 2)
            target = 25 if count == 1 else 250
            cpu_before, wall_before = procs.cpu_seconds(), time.monotonic()
            parts_before = procs.worker_detail()
            latencies, layer, events, lost, dups = asyncio.run(
                run_scenario(
                    all_sessions[:count],
                    port,
                    rounds,
                    args.calls,
                    probe_layer=args.layer,
                    post_times=POST_TIMES.setdefault(f"{count} sessions", []),
                    click=args.click,
                )
            )
            cpu = procs.cpu_seconds()
            wall = time.monotonic() - wall_before
            used = {name: cpu[name] - cpu_before[name] for name in cpu}
            parts = procs.worker_detail()
            parts = {name: parts[name] - parts_before[name] for name in parts}
            details.append(
                f"{count:>3} sessions, {events} events: "
                + ", ".join(
                    f"{name} {seconds:.2f} s ({1000 * seconds / max(events, 1):.3f} ms/event)"
                    for name, seconds in parts.items()
                )
            )
            per_event = ", ".join(
                f"{name} {1000 * used[name] / max(events, 1):.3f}"
                for name in used
                if name.startswith(("daphne", "worker"))
            )
            usage.append(
                f"{count:>3} sessions: {wall:5.1f} s wall; CPU s: "
                + ", ".join(f"{name} {seconds:.1f}" for name, seconds in used.items())
                + f" ({os.cpu_count()} CPUs); ms per event: {per_event} (targets 0.2)"
            )
            rows.append((f"{count} session{'s' if count > 1 else ''} bursting", count, rounds,
                         events, latencies, layer, lost, dups, f"p99 <= {target} ms"))  # fmt: skip
        latencies, layer, events, lost, dups = asyncio.run(
            run_scenario(
                all_sessions[:30],
                port,
                2,
                args.calls,
                drop_half=True,
                probe_layer=args.layer,
                click=args.click,
            )
        )
        rows.append(("catch-up: 15 of 30 drop mid-burst", 30, 2, events, latencies, layer, lost,
                     dups, "0 lost"))  # fmt: skip
    finally:
        procs.stop()

    print_table(rows)
    print()
    how = (
        "over each page's websocket, as the lab page sends a click while it is live"
        if args.click == "socket"
        else "POST to daphne, as without a live socket"
    )
    print(f"Run burst, all pages at once ({how}; release to answer):")
    for name, times in POST_TIMES.items():
        if times:
            print(f"  {name:>12}: p50 {pct(times, 0.5):.0f} ms, p99 {pct(times, 0.99):.0f} ms, "
                  f"max {max(times):.0f} ms ({len(times)} clicks)")  # fmt: skip
    print()
    print("CPU used during each scenario (worker: with its journal writer process; clients: this")
    print("process, which on a real class would be the students' laptops):")
    for line in usage:
        print("  " + line)
    print("The worker's CPU by part (threads of the worker process; its journal writer):")
    for line in details:
        print("  " + line)


def print_table(rows: list[tuple]) -> None:
    def cells(values: list[float], q: tuple[float, ...], width: int) -> str:
        if not values:
            return " ".join(f"{'-':>{width}}" for _ in q)
        return " ".join(f"{(max(values) if x == 1 else pct(values, x)):>{width}.1f}" for x in q)

    head = f"{'scenario':<34} {'sess':>4} {'rnds':>4} {'events':>6} {'p50 ms':>7} {'p95 ms':>7} "
    head += f"{'p99 ms':>7} {'max ms':>7} {'layer p50':>9} {'layer p99':>9} {'lost':>4} {'dup':>3}"
    head += "  target"
    print()
    print("Latency from the engine emitting an event to a websocket client having it; 'layer'")
    print("(with --layer): the same to the channel layer (journal writer + Redis, before daphne).")
    print(head)
    print("-" * len(head))
    for name, count, rounds, events, lat, layer, lost, dups, target in rows:
        print(
            f"{name:<34} {count:>4} {rounds:>4} {events:>6} {cells(lat, (0.5, 0.95, 0.99, 1), 7)} "
            f"{cells(layer, (0.5, 0.99), 9)} {lost:>4} {dups:>3}  {target}"
        )


if __name__ == "__main__":
    run("push_bench", parser(), measure)
