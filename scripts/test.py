"""``make test``: the whole test suite, then the model and service tests on PostgreSQL.

1. Creates the virtual environment if needed and installs requirements-dev.txt
   (scripts/bootstrap.py, shared with make run).
2. Redis: the one at REDIS_URL (default redis://127.0.0.1:6379) when it answers, else a
   private redis-server on a free port (scripts/services.py, shared with make run).
3. The browser for the e2e tests: LAB_CHROMIUM, else Debian's chromium, else Playwright's
   own Chromium (``python -m playwright install chromium`` when the selected tests need a
   browser and none is there). None to be had: the command names it and fails before running
   anything. LAB_SKIP_BROWSER_TESTS=1 skips the browser tests instead, loudly.
4. ``pytest -m "not postgres_only"``: every test on the embedded SQLite database but those that
   need PostgreSQL (the scale-out test), which step 5 runs.
5. ``pytest -m postgres`` once more with DATABASE_URL pointing at PostgreSQL
   (LAB_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failurelab; the
   database is created if missing, pytest-django creates and drops ``test_<name>``). When
   nothing answers there, a private PostgreSQL is started from the machine's own binaries
   (``initdb`` into a temporary directory, a free port). LAB_SKIP_POSTGRES=1 skips this step,
   loudly.

Everything it started is printed, and stopped at the end, also on Ctrl-C (SIGINT), SIGTERM
or SIGHUP: pytest runs in a process group of its own and gets one SIGINT from here, so its
fixtures stop their servers before the private Redis and PostgreSQL go.

Extra arguments go to both pytest runs (``make test ARGS="-x -k admin"``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap
import services

ROOT = bootstrap.ROOT
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/failurelab"
DEBIAN_CHROMIUM = "/usr/bin/chromium"
PYTEST_STOP_TIMEOUT_S = 60.0
BROWSER_INSTALL_TIMEOUT_S = 600.0
OUT = services.Output("test")
say = OUT.say


class Stop(Exception):
    """Raised by the signal handler: the user asked to stop."""


def pytest(args: list[str], env: dict[str, str]) -> int:
    """Run pytest in its own process group. A stop signal here becomes one SIGINT to it (its
    KeyboardInterrupt handling runs the fixtures' teardown), then Stop is raised again."""
    cmd = [sys.executable, "-m", "pytest", *args]
    say(" ".join(cmd[2:]))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait()
    except Stop:
        services.ignore_stop_signals()
        say("interrupted: letting pytest stop its servers")
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=PYTEST_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            say(f"pytest did not stop in {PYTEST_STOP_TIMEOUT_S:.0f} s: killing it")
            services.signal_group(proc, signal.SIGKILL)
            proc.wait()
        raise


# --- what the tests need ------------------------------------------------------------------------


def ensure_redis(procs: services.Processes, env: dict[str, str]) -> None:
    """REDIS_URL for the tests: the configured one when it answers, else a private one."""
    url = env.get("REDIS_URL", "").strip() or DEFAULT_REDIS_URL
    host, port = services.redis_host_port(url)
    if services.redis_answers(host, port):
        say(f"Redis: using the one answering at {url}")
        env["REDIS_URL"] = url
        return
    say(f"Redis: nothing answers at {url}; starting a private one")
    data_dir = Path(env.get("LAB_DATA_DIR") or ROOT / "db") / "test-redis"
    private = services.start_private_redis(procs, sys.executable, data_dir, env)
    say(f"Redis: STARTED a private redis-server at {private} (stopped at the end)")
    env["REDIS_URL"] = private
    env.pop("ENGINE_TEST_REDIS_URL", None)  # the engine tests follow REDIS_URL (db 15)


def playwright_chromium() -> str | None:
    """The path of Playwright's own Chromium when it is installed."""
    probe = (
        "from playwright.sync_api import sync_playwright\n"
        "with sync_playwright() as p: print(p.chromium.executable_path)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    return found if found and Path(found).is_file() else None


def selects_browser_tests(args: list[str], env: dict[str, str]) -> bool:
    """Whether the pytest selection ``args`` contains e2e (browser) tests."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return any(line.startswith("tests/e2e/") for line in listed.stdout.splitlines())


def ensure_browser(args: list[str], env: dict[str, str]) -> bool:
    """Set LAB_CHROMIUM for the e2e tests; False (after saying why) when there is none."""
    if services.env_flag("LAB_SKIP_BROWSER_TESTS"):
        say("browser: SKIPPING THE BROWSER TESTS: LAB_SKIP_BROWSER_TESTS is set")
        return True
    configured = env.get("LAB_CHROMIUM", "").strip()
    if configured:
        if not Path(configured).is_file():
            OUT.error(f"LAB_CHROMIUM={configured} does not exist")
            return False
        say(f"browser: {configured} (LAB_CHROMIUM)")
        return True
    if Path(DEBIAN_CHROMIUM).is_file():
        say(f"browser: Debian's chromium, {DEBIAN_CHROMIUM}")
        env["LAB_CHROMIUM"] = DEBIAN_CHROMIUM
        return True
    own = playwright_chromium()
    if own:
        say(f"browser: Playwright's own Chromium, {own}")
        env["LAB_CHROMIUM"] = own
        return True
    if not selects_browser_tests(args, env):
        say(f"browser: none ({DEBIAN_CHROMIUM} is missing); no browser test is selected")
        return True
    say(f"browser: no {DEBIAN_CHROMIUM}: installing Playwright's own Chromium")
    cmd = [sys.executable, "-m", "playwright", "install", "chromium"]
    say(" ".join(cmd[1:]))
    try:
        installed = subprocess.run(cmd, env=env, timeout=BROWSER_INSTALL_TIMEOUT_S, check=False)
        ok = installed.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    own = playwright_chromium() if ok else None
    if own:
        say(f"browser: INSTALLED Playwright's own Chromium, {own}")
        env["LAB_CHROMIUM"] = own
        return True
    OUT.error(
        "no Chromium for the browser tests: Debian's chromium is not installed "
        f"({DEBIAN_CHROMIUM}) and `python -m playwright install chromium` failed. "
        "Install one (apt-get install chromium), or set LAB_CHROMIUM to a Chromium binary, "
        "or skip the browser tests with LAB_SKIP_BROWSER_TESTS=1 (they are then reported "
        "as skipped)."
    )
    return False


def ensure_postgres(procs: services.Processes, cleanup: list) -> str | None:
    """The PostgreSQL URL for the second run: the configured one when something answers
    there, else a private cluster. None (after saying why) when neither works."""
    url = os.environ.get("LAB_TEST_DATABASE_URL", "").strip() or DEFAULT_PG_URL
    if not services.postgres_answers(url):
        say(f"PostgreSQL: nothing answers at {url}; starting a private one")
        bin_dir = services.find_postgres_bin()
        if bin_dir is None:
            OUT.error(
                "no PostgreSQL answers and no PostgreSQL binaries were found (initdb and "
                "postgres: on PATH, in /usr/lib/postgresql/*/bin, or LAB_PG_BIN). Install "
                "them (apt-get install postgresql), start a server and set "
                "LAB_TEST_DATABASE_URL, or skip this run with LAB_SKIP_POSTGRES=1"
            )
            return None
        cluster = services.PrivatePostgres(procs, bin_dir)
        cleanup.append(cluster.remove)
        try:
            cluster.start()
        except (RuntimeError, OSError) as exc:
            OUT.error(f"the private PostgreSQL ({bin_dir}) did not start: {exc}")
            return None
        owner = f" as user {cluster.user.pw_name}" if cluster.user else ""
        say(
            f"PostgreSQL: STARTED a private server ({bin_dir}/postgres, pid {cluster.proc.pid}"
            f"{owner}) at {cluster.url}, data in {cluster.data_dir} (removed at the end)"
        )
        url = cluster.url
    else:
        say(f"PostgreSQL: using the one answering at {url}")
    try:
        services.ensure_database(url, say)
    except Exception as exc:
        OUT.error(f"PostgreSQL at {url} refused: {exc}")
        say("fix it, or set LAB_TEST_DATABASE_URL (LAB_SKIP_POSTGRES=1 to skip)")
        return None
    return url


def run(extra: list[str], env: dict[str, str], procs, cleanup: list) -> int:
    ensure_redis(procs, env)
    if not ensure_browser(extra, env):
        return 1

    say("1/2 the whole suite (SQLite)")
    # Tests that need PostgreSQL (four processes on one database) run in step 2, not here.
    say("   (tests marked postgres_only are deselected here and run in step 2)")
    first = pytest(["-m", "not postgres_only", *extra], env)
    if first != 0:
        say(f"the suite failed (exit {first})")
        return first

    if services.env_flag("LAB_SKIP_POSTGRES"):
        say("2/2 SKIPPED: LAB_SKIP_POSTGRES is set, the PostgreSQL run did not happen")
        return 0
    say("2/2 model and service tests on PostgreSQL")
    pg_url = ensure_postgres(procs, cleanup)
    if pg_url is None:
        return 1
    env["DATABASE_URL"] = pg_url
    say(f"DATABASE_URL={pg_url}")
    second = pytest(["-m", "postgres", *extra], env)
    if second == 5:
        say("no test is marked postgres")
        return 1
    return second


def main() -> int:
    bootstrap.reexec_in_venv(__file__, dev=True)
    extra = sys.argv[1:]
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("DATABASE_URL", None)  # the first run is the embedded default

    procs = services.Processes(OUT)
    cleanup: list = []

    # The first stop signal raises Stop; later ones (make forwards the SIGTERM that
    # ``timeout`` also sends to the whole group) are ignored while pytest stops.
    with services.raise_on_stop_signals(lambda signum: Stop(signal.Signals(signum).name)):
        return _main(extra, env, procs, cleanup)


def _main(extra: list[str], env: dict[str, str], procs, cleanup: list) -> int:
    try:
        code = run(extra, env, procs, cleanup)
        if services.env_flag("LAB_SKIP_BROWSER_TESTS"):
            say("NOTE: the browser tests were SKIPPED (LAB_SKIP_BROWSER_TESTS is set)")
        return code
    except Stop as stop:
        say(f"{stop} received: stopped")
        return 130
    except RuntimeError as exc:
        OUT.error(str(exc))
        return 1
    finally:
        try:
            services.ignore_stop_signals()
        finally:  # even when a first signal arrives just now
            procs.stop_all()
            for step in cleanup:
                step()


if __name__ == "__main__":
    sys.exit(main())
