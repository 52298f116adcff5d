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

Steps 4 and 5 run side by side in five parts (most tests wait on servers, not on the CPU):
the integration tests in two halves, the browser tests, every other test, and the PostgreSQL
run. Each part has its own private redis-server, its own SQLite test
database and data directory, and its own log, ``artifacts/test-<part>.log``; a line says when
each part ends, a summary table closes the run, and a failed part's log tail is shown.
``LAB_TEST_SERIAL=1``, or test paths among the arguments, run steps 4 and 5 one after the
other in this terminal instead.

Extra arguments go to every pytest run (``make test ARGS="-x -k admin"``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap
import services

ROOT = bootstrap.ROOT
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/failurelab"
DEBIAN_CHROMIUM = "/usr/bin/chromium"
PYTEST_STOP_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 120.0
LOG_TAIL_LINES = 80
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
    with services.signals_held():  # no stop between the fork and the assignment
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
    if not services.env_flag("LAB_TEST_SERIAL") and not names_tests(extra):
        return run_parts(extra, env, procs, cleanup)
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


# --- the suite in parts, side by side -----------------------------------------------------------


class Part:
    """One pytest process of the parallel run: its name, its selection and its log."""

    def __init__(self, name: str, args: list[str], postgres: bool = False) -> None:
        self.name, self.args, self.postgres = name, args, postgres
        self.log = ROOT / "artifacts" / f"test-{name}.log"
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.seconds = 0.0


def names_tests(args: list[str]) -> bool:
    """Whether ``args`` name test files or directories (then the selection is the user's and
    the suite is not split)."""
    return any(not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in args)


def test_files(root: Path = ROOT) -> list[str]:
    """Every test module of the suite, as paths relative to ``root``, sorted."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py"))


def split_suite(files: list[str]) -> dict[str, list[str]]:
    """The SQLite parts: the integration tests in two halves by name (a to r, s to z), the
    browser tests, and everything else. Together they hold every file once."""
    first, second, browser, rest = [], [], [], []
    for path in files:
        if path.startswith("tests/integration/"):
            letter = Path(path).name.removeprefix("test_")[:1]
            (first if letter <= "r" else second).append(path)
        elif path.startswith("tests/e2e/"):
            browser.append(path)
        else:
            rest.append(path)
    return {
        "integration-a-r": first,
        "integration-s-z": second,
        "browser": browser,
        "the-rest": rest,
    }


def part_env(env: dict[str, str], part: Part, procs: services.Processes) -> dict[str, str]:
    """The part's own Redis, SQLite test database and data directory."""
    own = dict(env)
    data_dir = ROOT / "db" / f"test-{part.name}"
    own["LAB_DATA_DIR"] = str(data_dir)
    own["LAB_TEST_DB_NAME"] = str(data_dir / "test_db.sqlite3")
    own["REDIS_URL"] = services.start_private_redis(procs, sys.executable, data_dir / "redis", own)
    own.pop("ENGINE_TEST_REDIS_URL", None)
    say(f"{part.name}: STARTED a private redis-server at {own['REDIS_URL']} (stopped at the end)")
    return own


def start_part(part: Part, env: dict[str, str]) -> None:
    part.log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", *part.args]
    say(f"{part.name}: pytest {' '.join(part.args)[:160]} (log: {part.log.relative_to(ROOT)})")
    # A stop signal between the fork and the assignment would leave a pytest nobody stops:
    # it is held back until the part holds its process.
    with part.log.open("wb") as out, services.signals_held():
        part.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    part.started = time.monotonic()


def last_line(log: Path) -> str:
    """pytest's closing line ("12 passed in 3.4s"), or the log's last line."""
    lines = [ln.strip("= ") for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if " in " in line and any(w in line for w in ("passed", "failed", "error", "deselected")):
            return line
    return lines[-1] if lines else "(empty log)"


def part_ok(part: Part, extra: list[str]) -> bool:
    """Exit 0, or 5 (nothing collected) when the user's options filtered this part empty."""
    code = part.proc.returncode if part.proc else 1
    return code == 0 or (code == 5 and bool(extra))


def stop_parts(parts: list[Part]) -> None:
    """One SIGINT to each running part (pytest then tears its fixtures down), a wait, then
    SIGKILL for what is left."""
    running = [p for p in parts if p.proc and p.proc.poll() is None]
    for part in running:
        services.signal_group(part.proc, signal.SIGINT)
    deadline = time.monotonic() + PYTEST_STOP_TIMEOUT_S
    for part in running:
        try:
            part.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{part.name} did not stop in {PYTEST_STOP_TIMEOUT_S:.0f} s: killing it")
            services.signal_group(part.proc, signal.SIGKILL)
            part.proc.wait()


def wait_parts(parts: list[Part], extra: list[str]) -> None:
    """Wait for every part, saying when each ends and, every two minutes, what still runs."""
    started = time.monotonic()
    next_progress = started + PROGRESS_EVERY_S
    pending = list(parts)
    while pending:
        time.sleep(0.5)
        for part in list(pending):
            if part.proc.poll() is None:
                continue
            pending.remove(part)
            part.seconds = time.monotonic() - part.started
            verdict = "passed" if part_ok(part, extra) else f"FAILED (exit {part.proc.returncode})"
            say(f"{part.name} {verdict} after {part.seconds:.0f} s: {last_line(part.log)}")
        if pending and time.monotonic() >= next_progress:
            next_progress += PROGRESS_EVERY_S
            names = ", ".join(p.name for p in pending)
            say(f"{time.monotonic() - started:.0f} s: still running: {names}")


def run_parts(extra: list[str], env: dict[str, str], procs, cleanup: list) -> int:
    """Steps 4 and 5 side by side; exit 0 only when every part passed."""
    if not ensure_browser(extra, env):
        return 1
    started = time.monotonic()
    groups = split_suite(test_files())
    parts = [
        Part(name, ["-m", "not postgres_only", *paths, *extra]) for name, paths in groups.items()
    ]
    say("the suite in parts, side by side (LAB_TEST_SERIAL=1 runs them one after the other):")
    say("   (tests marked postgres_only are deselected on SQLite and run in the PostgreSQL part)")
    if services.env_flag("LAB_SKIP_POSTGRES"):
        say("the PostgreSQL part is SKIPPED: LAB_SKIP_POSTGRES is set")
    else:
        pg_url = ensure_postgres(procs, cleanup)
        if pg_url is None:
            return 1
        parts.append(Part("postgresql", ["-m", "postgres", *extra], postgres=True))
    try:
        for part in parts:
            own = part_env(env, part, procs)
            if part.postgres:
                own["DATABASE_URL"] = pg_url
                say(f"{part.name}: DATABASE_URL={pg_url}")
            start_part(part, own)
        wait_parts(parts, extra)
    except Stop:
        services.ignore_stop_signals()
        say("interrupted: letting every part stop its servers")
        stop_parts(parts)
        raise
    return report_parts(parts, extra, time.monotonic() - started)


def report_parts(parts: list[Part], extra: list[str], seconds: float) -> int:
    OUT.blank()
    say(f"{'part':<30} {'result':<8} {'seconds':>8}  pytest")
    failed = [p for p in parts if not part_ok(p, extra)]
    for part in parts:
        result = "FAILED" if part in failed else "passed"
        say(f"{part.name:<30} {result:<8} {part.seconds:>8.0f}  {last_line(part.log)}")
    say(f"the whole run took {seconds:.0f} s")
    for part in failed:
        OUT.blank()
        tail = part.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        say(f"the last {len(tail)} lines of {part.log.relative_to(ROOT)}:")
        for line in tail:
            print(line, flush=True)
    if all(p.proc.returncode == 5 for p in parts):
        say("no test was selected")
        return 1
    return 1 if failed else 0


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
