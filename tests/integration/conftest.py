"""Real parts for integration tests: a real Redis, real Celery workers, the real test database.

- ``celery_worker``: Celery's own embedded test worker (``celery.contrib.testing.worker``), with
  the thread pool the lab uses in production, consuming from the real Redis broker.
- ``worker_process``: a separate ``celery worker`` OS process (the command from
  ``lab_project.processes``), for tests that must kill a worker.
- ``daphne_process``: a separate ``daphne`` OS process (the same command as ``make run``) on a
  free port, for tests that spread pages over several web processes.
- Redis databases of the test run (REDIS_DB_BASE=8: broker, channel layer, engine, cache) are
  flushed before each test, so no test sees another's breaker.
- Every process started here is a server of tests/servers.py: a process group of its own,
  stopped by its fixture and, at the latest, when the test run ends however it ends.

Tests using these need ``@pytest.mark.django_db(transaction=True)``: workers use their own
database connections, so nothing may hide inside a test transaction.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from lab_project.processes import daphne_cmd, worker_cmd
from tests import servers
from tests.conftest import flush_test_redis

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_redis():
    flush_test_redis()
    yield


@pytest.fixture(scope="session", autouse=True)
def _close_background_connections(django_db_setup, django_db_blocker):
    """The journal writer thread keeps its own connection; close it before the test database
    is dropped (PostgreSQL refuses to drop a database someone is connected to)."""
    yield
    from labs.worker.writers import get_writer

    writer = get_writer()
    with django_db_blocker.unblock():
        writer.stop()  # closes the writer's database connection


@pytest.fixture
def celery_worker(transactional_db):
    """An embedded Celery worker (thread pool) running for the length of one test."""
    from celery.contrib.testing.worker import start_worker

    import labs.worker.tasks  # noqa: F401 - registered before the worker starts
    from lab_project.celery import app
    from labs.worker.writers import get_writer

    # Import every task module now: WorkController iterates app.tasks while it starts, and a
    # module with a shared_task imported meanwhile by another thread would change that dict
    # under it ("dictionary changed size during iteration", seen once in a full run).
    app.loader.import_default_modules()
    app.finalize(auto=True)
    with start_worker(
        app, pool="threads", concurrency=16, perform_ping_check=False, shutdown_timeout=30
    ) as worker:
        # As a real worker does when it is ready: boot the journal writer before any burst,
        # so a test's first burst is not journaled seconds late while Django boots in it.
        writer = get_writer()
        writer.start()
        assert writer.flush(120), "the journal writer did not start"
        yield worker
        get_writer().flush()
    get_writer().flush()


def subprocess_env() -> dict[str, str]:
    """Environment for a worker or daphne started by a test: same Redis dbs, same test db."""
    env = dict(os.environ)
    env["REDIS_DB_BASE"] = str(settings.REDIS_DB_BASE)
    env["PYTHONUNBUFFERED"] = "1"
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        env["LAB_SQLITE_PATH"] = str(db["NAME"])
        env.pop("DATABASE_URL", None)
    else:
        env["DATABASE_URL"] = (
            f"postgres://{db['USER'] or ''}{':' + db['PASSWORD'] if db['PASSWORD'] else ''}"
            f"@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        )
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


class WorkerProcess:
    """A ``celery worker`` OS process started by a test."""

    def __init__(
        self, log_path: Path, concurrency: int = 8, env: dict[str, str] | None = None
    ) -> None:
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115
        self.proc = servers.start(
            "a worker",
            [*worker_cmd(concurrency), "--without-heartbeat", "--without-gossip",
             "--without-mingle", "-n", f"test-{os.getpid()}-{time.monotonic_ns()}@%h"],
            env={**subprocess_env(), **(env or {})}, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_path.read_text()}")
            if b"ready." in self.log_path.read_bytes():
                return
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready after {timeout}s:\n{self.log_path.read_text()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown handler runs."""
        servers.kill(self.proc)

    def rss_bytes(self) -> int:
        """The process's resident memory now."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        """SIGTERM to its group (a warm shutdown), SIGKILL after 20 s."""
        servers.stop(self.proc)
        self.log.close()


@pytest.fixture
def worker_process(transactional_db, tmp_path):
    """Factory: start a separate worker process; every one started is stopped at teardown."""
    started: list[WorkerProcess] = []

    def start(concurrency: int = 8, env: dict[str, str] | None = None) -> WorkerProcess:
        """``env``: variables set for this worker only (DATABASE_POOL_SIZE, say)."""
        worker = WorkerProcess(tmp_path / f"worker-{len(started)}.log", concurrency, env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


class DaphneProcess:
    """A ``daphne`` OS process started by a test, serving the site on a free port."""

    def __init__(
        self, log_path: Path, timeout: float = 60.0, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.base_url = self.url = self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115
        self.proc = servers.start(
            "daphne", daphne_cmd("127.0.0.1", self.port), env=env or subprocess_env(),
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float) -> None:
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited early:\n{self.log_path.read_text()}")
            try:
                url = f"{self.base_url}/accounts/login/"
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (ours)
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"daphne not answering after {timeout}s:\n{self.log_path.read_text()}")

    def rss_bytes(self) -> int:
        """The process's resident memory now."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        """SIGTERM to its group, SIGKILL after 20 s."""
        servers.stop(self.proc)
        self.log.close()


@pytest.fixture
def daphne_process(transactional_db, tmp_path):
    """Factory: start a daphne process; every one started is stopped at teardown."""
    started: list[DaphneProcess] = []

    def start() -> DaphneProcess:
        web = DaphneProcess(tmp_path / f"daphne-{len(started)}.log")
        started.append(web)
        return web

    yield start
    for web in started:
        web.stop()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, message: str = ""):
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {message or predicate}")


def wait_run_ended(run, timeout: float = 90.0):
    """Poll ``run`` (a burst, a traffic run) until it is no longer queued or running; the
    run, refreshed, for the test to check how it ended."""

    def ended():
        run.refresh_from_db()
        return run.status not in type(run).ACTIVE_STATUSES

    wait_for(ended, timeout, interval=0.2, message=f"{type(run).__name__.lower()} {run.pk} to end")
    return run


def free_port() -> int:
    """A TCP port nothing listens on now (loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnRedis:
    """A redis-server process of one test's own, which the test may kill and start again on the
    same port (empty, as after a crash with persistence off). ``url`` names database 0."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.directory = directory
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = servers.start(
            "a test's redis-server",
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None:
            servers.kill(self.proc)

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture
def own_redis(tmp_path):
    """A started :class:`OwnRedis`, killed at the end of the test."""
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.kill()
