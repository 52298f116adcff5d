"""``make run``: the whole lab on this machine, in one command.

Creates the virtual environment if needed (scripts/bootstrap.py), migrates, loads the demo
data, starts Redis when none is configured or answering (a private instance), a Celery worker
and daphne, prints the URL and the demo logins, and on Ctrl-C (SIGINT), SIGTERM or SIGHUP
stops every process it started, then exits 0.

Each child runs in its own process group, so a terminal's Ctrl-C reaches only this script,
which then stops the children in order (web first, Redis last) and their whole groups (the
worker's pool threads, its journal writer, anything a child forked). A closed stdout (``make
run | tee lab.log``: Ctrl-C kills ``tee`` too) never stops that: status lines then go nowhere
(scripts/services.py, shared with make test).

Environment: LAB_PORT (default 8000), LAB_HOST (default 127.0.0.1), REDIS_URL (skip the
Redis probe and use it), LAB_PRIVATE_REDIS=1 (always start a private Redis),
LAB_WORKER_CONCURRENCY, LAB_DEMO_PASSWORD, and every Django setting variable (README).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap
import services
from services import (  # noqa: F401 (re-exported for tests and callers)
    Output,
    Processes,
    env_flag,
    find_redis_server,
    free_port,
    port_is_free,
    redis_answers,
)

ROOT = bootstrap.ROOT
READY_TIMEOUT_S = 90.0
OUT = Output("lab")
say = OUT.say
fail = OUT.error


def env_port(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise SystemExit(f"[lab] error: {name} must be a port number 1..65535, got {raw!r}")
    return int(raw)


def env_int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise SystemExit(f"[lab] error: {name} must be a whole number {low}..{high}, got {raw!r}")
    return int(raw)


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
    from lab_project import processes

    # .env (if any) fills in what the real environment does not set.
    os.environ.update(
        {k: v for k, v in read_env_file(ROOT / ".env").items() if k not in os.environ}
    )
    host = os.environ.get("LAB_HOST", "").strip() or "127.0.0.1"
    port = env_port("LAB_PORT", 8000)
    web_processes = env_int("LAB_WEB_PROCESSES", 1, 1, 8)
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

    procs = Processes(OUT)

    # SIGHUP too: a closed terminal must not leave the children behind. The first signal
    # raises Stop; later ones are ignored while everything stops.
    with services.raise_on_stop_signals(lambda signum: Stop(signal.Signals(signum).name)):
        return _run(procs, python, bin_dir, env, host, port, processes, web_processes)


def _run(procs, python, bin_dir, env, host, port, processes, web_processes) -> int:
    try:
        return supervise(procs, python, bin_dir, env, host, port, processes, web_processes)
    except Stop as stop:
        services.ignore_stop_signals()
        OUT.blank()
        say(f"{stop} received: stopping everything")
        procs.stop_all()
        say("stopped")
        return 0
    except subprocess.CalledProcessError as exc:
        fail(f"{' '.join(map(str, exc.cmd))} failed with exit code {exc.returncode}")
        return 1
    finally:
        # Whatever happened above (an error, a second signal, a closed stdout), every child
        # and its whole process group is stopped before this process exits.
        try:
            services.ignore_stop_signals()
        finally:  # even when a first signal arrives just now
            procs.stop_all()


def supervise(procs, python, bin_dir, env, host, port, processes, web_processes=1) -> int:
    """Start everything, then watch the children until one dies (1) or a signal (Stop).
    ``processes`` is lab_project.processes (the commands); ``web_processes`` daphne
    processes serve the port (more than one: on one shared listening socket)."""
    # Redis first: the migrations do not need it, but it takes a moment to answer.
    if not os.environ.get("REDIS_URL", "").strip():
        private = env_flag("LAB_PRIVATE_REDIS")
        if not private and redis_answers("127.0.0.1", 6379):
            say("using the Redis that answers at 127.0.0.1:6379")
        else:
            data_dir = Path(env.get("LAB_DATA_DIR") or ROOT / "db") / "redis"
            try:
                env["REDIS_URL"] = services.start_private_redis(procs, python, data_dir, env)
            except RuntimeError as exc:
                fail(str(exc))
                return 1
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
    worker = processes.worker_cmd(concurrency)
    worker[0] = str(bin_dir / worker[0])
    procs.start("worker", worker, env)
    if web_processes == 1:
        web = processes.daphne_cmd(host, port)
        web[0] = str(bin_dir / web[0])
        procs.start("web", web, env)
    else:
        listener = processes.shared_listener(host, port)
        try:
            for n in range(1, web_processes + 1):
                web = processes.daphne_fd_cmd(listener.fileno())
                web[0] = str(bin_dir / web[0])
                procs.start(f"web {n} of {web_processes}", web, env,
                            pass_fds=(listener.fileno(),))  # fmt: skip
        finally:
            listener.close()  # the web processes hold it

    url = f"http://{'localhost' if host in {'127.0.0.1', '0.0.0.0'} else host}:{port}/"  # noqa: S104
    if not wait_for_http(f"http://127.0.0.1:{port}/accounts/login/", procs, READY_TIMEOUT_S):
        dead = ", ".join(f"{name} (exit {code})" for name, code in procs.dead())
        fail(f"the lab did not come up: {dead or 'no answer in time'}")
        return 1

    OUT.blank()
    say(f"Failure Lab is running at {url}")
    say("log in as student1 (or student2, student3), instructor or admin; password: "
        f"{os.environ.get('LAB_DEMO_PASSWORD') or 'failurelab'}")  # fmt: skip
    say(f"back office: {url}admin/   stop: Ctrl-C")
    OUT.blank()

    while True:
        dead = procs.dead()
        if dead:
            name, code = dead[0]
            fail(f"{name} exited unexpectedly (code {code}); stopping the rest")
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
