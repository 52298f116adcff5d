"""Helpers every benchmark here shares (no Django at import time), and the one place that
starts and stops a benchmark's servers.

Import them as ``from benchmarks.bench_common import pct`` (each script puts the project root on
sys.path first).

A benchmark that starts anything (a redis-server, Celery workers, daphne, a PostgreSQL
database) is written as a body run by :func:`run`::

    def measure(args, bench: Bench) -> None:
        redis_url = bench.redis(shared=args.shared_redis)
        worker = bench.start("worker", [...], log=...)
        ...

    if __name__ == "__main__":
        run("my_bench", parser(), measure)

:func:`run` parses the arguments first (``--help`` and a bad argument exit before anything
starts), then runs the body inside :class:`Bench`, which owns every child: each starts in a
process group of its own (``scripts/services.py``'s :class:`Processes`, the same code that
``make run`` and ``make test`` use) and all are stopped, newest first, on every way out: the
body's end, an exception, Ctrl-C, SIGTERM (as ``timeout`` sends) and SIGHUP.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import services  # noqa: E402  (scripts/services.py: what make test and make run use)

sys.path.remove(str(ROOT / "scripts"))

#: Servers a benchmark starts run as deployed (docker-compose.yml): DJANGO_DEBUG=false, so no
#: query logging (with SQLite, DEBUG also runs a second query per query to quote its
#: parameters). Plain HTTP on 127.0.0.1, so no TLS redirect and no secure-only cookies.
SERVER_ENV = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    "DJANGO_SECURE_COOKIES": "false",
}

#: How long a started server may take to answer (a loaded machine is slow).
READY_TIMEOUT_S = 90.0


# --- arguments ----------------------------------------------------------------------------------


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high``, else argparse's error
    naming the option, e.g. ``argument --rate: must be a whole number from 1 to 20, got 0``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {low:,} to {high:,}, got {text!r}"
            )
        return value

    return parse


def float_range(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type``: a number from ``low`` to ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be a number from {low:g} to {high:g}, got {text!r}"
            )
        return value

    return parse


# --- the servers of one run ---------------------------------------------------------------------


class _Output(services.Output):
    """Status lines on stderr: stdout is the benchmark's table."""

    def say(self, message: str) -> None:
        self._write(sys.stderr, f"[{self.prefix}] {message}")


class Bench:
    """Everything one benchmark run started: child processes (each the leader of its own
    process group), log files, temporary databases. A context manager: its exit stops every
    child (SIGTERM to the group, a wait, SIGKILL for what is left), then runs the clean-ups
    registered with :meth:`on_exit`, newest first. While inside, SIGINT, SIGTERM and SIGHUP
    raise :class:`services.StopRequested` in the main thread (once: a second signal while
    stopping is ignored)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.out = _Output(name)
        self.procs = services.Processes(self.out)
        self.redis_proc: subprocess.Popen | None = None
        self._cleanups: list[Callable[[], object]] = []
        self._signals = None

    def __enter__(self) -> Bench:
        self._signals = services.raise_on_stop_signals()
        self._signals.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            # A signal arriving even here raises after ignoring the next ones, and the
            # stopping below runs all the same.
            services.ignore_stop_signals()
        finally:
            try:
                self.procs.stop_all()
            finally:
                while self._cleanups:
                    try:
                        self._cleanups.pop()()
                    except Exception as error:  # every clean-up runs
                        self.out.say(f"clean-up failed: {error!r}")
                self._signals.__exit__(*exc)

    def on_exit(self, cleanup: Callable[[], object]) -> None:
        """Run ``cleanup`` when the run ends, however it ends (after the children stopped)."""
        self._cleanups.append(cleanup)

    def start(
        self,
        name: str,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
        **popen,
    ) -> subprocess.Popen:
        """Start ``cmd`` in a process group of its own, stopped with the run (or by
        :meth:`stop`). ``log``: its stdout and stderr go there (else nowhere)."""
        if log is not None:
            handle = open(log, "wb")  # noqa: SIM115 - closed with the run
            self.on_exit(handle.close)
            popen.update(stdout=handle, stderr=subprocess.STDOUT)
        else:
            popen.setdefault("stdout", subprocess.DEVNULL)
            popen.setdefault("stderr", subprocess.STDOUT)
        popen.setdefault("cwd", ROOT)
        return self.procs.start(name, cmd, env, stop_signal=stop_signal, quiet=True, **popen)

    def stop(self, proc: subprocess.Popen) -> None:
        """Stop one child before the run ends (its whole process group)."""
        self.procs.stop(proc)

    def wait_ready(self, proc: subprocess.Popen, name: str, ready: Callable[[], bool],
                   where: str = "", timeout: float = READY_TIMEOUT_S) -> None:  # fmt: skip
        """Poll ``ready()`` until it is true; exit naming ``name`` (and ``where`` its log
        is) when the process ends first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name} did not start{'; see ' + where if where else ''}")
            time.sleep(0.1)

    def private_redis(self) -> tuple[str, int]:
        """A ``redis-server`` of the run's own on a free port of 127.0.0.1 (nothing saved),
        answering; returns its URL and port. Other benchmarks and test runs on the machine
        use the shared one, and their brokers would take this run's tasks and their flushes
        its keys. Exits naming what is missing when ``redis-server`` is not on PATH."""
        server = shutil.which("redis-server")
        if not server:
            raise SystemExit(f"{self.name} needs redis-server on PATH (it starts its own)")
        port = free_port()
        workdir = self.temp_dir("redis")
        proc = self.start(
            "a private Redis",
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
        )  # fmt: skip
        self.wait_ready(proc, "the private redis-server",
                        lambda: services.redis_answers("127.0.0.1", port))  # fmt: skip
        self.redis_proc = proc
        return f"redis://127.0.0.1:{port}", port

    def redis(self, shared: bool = False) -> str:
        """Point this process (and the servers it starts) at the run's Redis: a private
        ``redis-server`` (:meth:`private_redis`), or with ``shared`` (``--shared-redis``) or
        ``BENCH_REDIS_URL`` the machine's one (REDIS_URL), whose databases
        ``BENCH_REDIS_DB_BASE`` (default 4) to +3 are the run's and flushed: never 0..3, a
        development instance's. Sets REDIS_URL and REDIS_DB_BASE; returns the URL."""
        base = os.environ.get("BENCH_REDIS_DB_BASE", "4")
        if "BENCH_REDIS_URL" in os.environ:
            os.environ["REDIS_URL"] = os.environ["BENCH_REDIS_URL"]
            shared = True
        if shared:
            if not base.isdigit() or int(base) < 4:
                raise SystemExit(
                    "BENCH_REDIS_DB_BASE must be 4 or more: 0..3 are a development instance's"
                )
            os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379")
        else:
            os.environ["REDIS_URL"] = self.private_redis()[0]
        os.environ["REDIS_DB_BASE"] = base
        return os.environ["REDIS_URL"]

    def database(self, label: str) -> None:
        """The run's database: with DATABASE_URL (PostgreSQL), that one, created if missing;
        else a SQLite file of this run's own (LAB_SQLITE_PATH), removed at the end: two runs
        at once on one machine must not empty each other's."""
        if "DATABASE_URL" in os.environ:
            ensure_database()
            return
        path = Path(tempfile.gettempdir()) / f"failurelab-{label}-{os.getpid()}.sqlite3"
        os.environ["LAB_SQLITE_PATH"] = str(path)

        def remove() -> None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

        remove()
        self.on_exit(remove)

    def temp_dir(self, label: str) -> Path:
        """A temporary directory of this run's own, removed at the end."""
        path = Path(tempfile.mkdtemp(prefix=f"{self.name}-{label}-"))
        self.on_exit(lambda: shutil.rmtree(path, ignore_errors=True))
        return path

    def log_dir(self) -> Path:
        """A directory for the servers' logs, kept after the run (printed on a failure)."""
        return Path(tempfile.mkdtemp(prefix=f"{self.name}-logs-"))


def run(name: str, parser: argparse.ArgumentParser,
        body: Callable[[argparse.Namespace, Bench], int | None],
        argv: list[str] | None = None) -> NoReturn:  # fmt: skip
    """The benchmark's entry point: parse the arguments (``--help`` and a bad argument end
    here, nothing started), then run ``body(args, bench)`` inside a :class:`Bench`. Exits
    with the body's return value; after a stop signal, once everything stopped, at once
    with 128 + the signal's number (no waiting for the body's threads), whatever error the
    signal surfaced as.

    ``--plain NAME[,NAME]`` runs everything with those overrides of a library's private parts
    switched off (``LAB_PLAIN``, ``lab_project.env.OVERRIDES``), to measure each beside the
    plain library (docs/scaling.md)."""
    parser.add_argument("--plain", metavar="NAME", default="",
                        help="switch off these overrides (comma-separated; LAB_PLAIN)")
    args = parser.parse_args(argv)
    if args.plain:
        os.environ["LAB_PLAIN"] = args.plain
    try:
        with Bench(name) as bench:
            code = body(args, bench)
    except BaseException as exc:
        # The stop may surface as another error: asyncio code that was running when the
        # signal came turns it into, say, a closed websocket.
        stop = exc if isinstance(exc, services.StopRequested) else services.stop_received()
        if stop is None:
            raise
        _Output(name).say(f"{stop}: everything it started is stopped")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(stop.exit_code)
    sys.exit(code or 0)


# --- the rest -------------------------------------------------------------------------------


def ensure_database() -> None:
    """When ``DATABASE_URL`` names a PostgreSQL database, create it if it does not exist; exit
    with a message naming the server when it does not answer."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return
    try:
        services.ensure_database(url)
    except Exception as exc:  # psycopg.OperationalError: no server, wrong credentials
        sys.exit(f"DATABASE_URL {url}: cannot reach its PostgreSQL server ({exc})")


def pct(values, q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    """A TCP port nobody listens on at the moment (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(**extra: str) -> dict[str, str]:
    """The environment for a server the run starts: this process's (REDIS_URL, the
    database, the secret key), this venv's scripts first on PATH, unbuffered output."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def collect_static(env: dict[str, str]) -> None:
    """Production static files (a manifest) for servers started with ``SERVER_ENV``, as
    ``make run`` does for DJANGO_DEBUG=false."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
