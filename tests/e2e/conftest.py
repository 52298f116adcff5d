"""Browser tests: the real site on daphne, driven by headless Chromium (Playwright, sync API).

Fixtures, meant for every e2e test (experiments, the live lab page, ...):

- ``daphne_server`` (session): starts ``daphne`` with the command of
  :func:`lab_project.processes.daphne_cmd` on a free port, pointed at pytest-django's test
  database (SQLite: ``LAB_SQLITE_PATH``; PostgreSQL: ``DATABASE_URL`` with the test database
  name) and at the test run's Redis databases (``REDIS_DB_BASE``); waits until
  ``/accounts/login/`` answers; yields the base URL (``http://127.0.0.1:PORT``); stops
  daphne (its process group: tests/servers.py) at the end of the session. Its output goes to ``artifacts/e2e/daphne.log``.
- ``browser`` (session): headless Chromium: ``LAB_CHROMIUM`` (``make test`` sets it), else
  Debian's ``/usr/bin/chromium``, else Playwright's own (``python -m playwright install
  chromium``; ``make test`` installs it when neither is there). No browser is a test
  failure, never a silent skip; ``LAB_SKIP_BROWSER_TESTS=1`` skips the e2e tests instead,
  and the skip says so.
- ``page`` (per test): a fresh browser context (own cookies) and page; at teardown a
  screenshot is saved to ``artifacts/e2e/<test name>.png``.
- ``e2e_worker`` (per test): a Celery worker process on the test database and the test run's
  Redis, with 8 threads or the test module's ``WORKER_CONCURRENCY`` (a traffic run holds a
  thread for as long as it runs); its log is kept as ``artifacts/e2e/<module>-worker.log`` (``lab-page-worker.log``).
- ``login(page, base_url, username, password)``: logs in through the real login form.

Tests that use ``daphne_server`` need ``@pytest.mark.django_db(transaction=True)`` (daphne
reads the database through its own connection, so data must be committed) and the ``e2e``
mark. Create users with the helpers of ``tests/conftest.py`` (``make_user``, ...).

Playwright's sync API keeps an asyncio loop running in the test thread while the browser is
up, and Django refuses ORM calls when it sees one (``SynchronousOnlyOperation``). The
``browser`` fixture therefore sets ``DJANGO_ALLOW_ASYNC_UNSAFE`` while it lives (as
pytest-django's docs advise for Playwright), and e2e tests are moved to the end of the run so
that no other test (an async channels test, say) ever runs beside that loop. Daphne itself
never gets the variable.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab_project.processes import daphne_cmd
from tests import servers

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "e2e"
DEBIAN_CHROMIUM = "/usr/bin/chromium"
SKIP_VARIABLE = "LAB_SKIP_BROWSER_TESTS"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long to wait for daphne to answer, and for page events by default (ms for Playwright).
SERVER_START_TIMEOUT = 60.0
PAGE_TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(config, items):
    """Run e2e tests last (see the module docstring: the browser's event loop)."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env() -> dict[str, str]:
    """Environment for a server process started by a test: the test database, the test
    run's Redis databases, and this virtualenv's scripts first on PATH."""
    from django.conf import settings
    from django.db import connection

    env = dict(os.environ)
    env["REDIS_DB_BASE"] = os.environ.get("REDIS_DB_BASE", str(settings.REDIS_DB_BASE))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        env["LAB_SQLITE_PATH"] = str(db["NAME"])
        env.pop("DATABASE_URL", None)
    else:
        password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
        env["DATABASE_URL"] = (
            f"postgres://{db['USER'] or ''}{password}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _wait_until_answering(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (our server)
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"daphne did not answer {url} within {SERVER_START_TIMEOUT}s:\n{log.read_text()}"
    )


@pytest.fixture(scope="session")
def daphne_server(django_db_setup) -> Iterator[str]:
    """The site served by daphne on a free port; yields its base URL."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    host, port = "127.0.0.1", _free_port()
    log_path = ARTIFACTS / "daphne.log"
    with open(log_path, "wb") as log:
        proc = servers.start(
            "daphne", daphne_cmd(host, port), env=server_env(), stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            base_url = f"http://{host}:{port}"
            _wait_until_answering(f"{base_url}/accounts/login/", proc, log_path)
            yield base_url
        finally:
            servers.stop(proc, timeout=15)


def chromium_executable() -> str | None:
    """LAB_CHROMIUM (must exist), else Debian's chromium, else None: Playwright's own."""
    configured = os.environ.get("LAB_CHROMIUM", "").strip()
    if configured:
        if not Path(configured).is_file():
            pytest.fail(f"LAB_CHROMIUM={configured} does not exist", pytrace=False)
        return configured
    return DEBIAN_CHROMIUM if Path(DEBIAN_CHROMIUM).is_file() else None


def _skip_requested() -> bool:
    return os.environ.get(SKIP_VARIABLE, "").strip().lower() in {"1", "true", "yes", "on"}


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (see the module docstring for which one)."""
    if _skip_requested():
        pytest.skip(f"BROWSER TESTS NOT RUN: {SKIP_VARIABLE} is set")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            executable = chromium_executable()
            try:
                chromium = playwright.chromium.launch(
                    executable_path=executable, headless=True, args=CHROMIUM_ARGS
                )
            except PlaywrightError as exc:
                pytest.fail(
                    f"no Chromium for the browser tests ({executable or 'Playwright own'}): "
                    f"{str(exc).splitlines()[0]}. Install Debian's (apt-get install chromium) "
                    "or Playwright's (python -m playwright install chromium), set LAB_CHROMIUM, "
                    f"or set {SKIP_VARIABLE}=1 to skip these tests",
                    pytrace=False,
                )
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, request):
    """A page in a fresh context; a screenshot of it lands in artifacts/e2e/ at teardown."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    pg = context.new_page()
    try:
        yield pg
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        try:
            pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        finally:
            context.close()


def login(page, base_url: str, username: str, password: str) -> None:
    """Log in through the login form; fails the test if the login is refused."""
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.click("button[type=submit]")
    if "/accounts/login/" in page.url:
        raise AssertionError(f"login as {username!r} was refused (still on {page.url})")


@pytest.fixture
def e2e_worker(request, transactional_db, tmp_path):
    """A Celery worker process on the test database and the test run's Redis."""
    from tests.conftest import flush_test_redis
    from tests.integration.conftest import WorkerProcess

    flush_test_redis()
    concurrency = getattr(request.module, "WORKER_CONCURRENCY", 8)
    worker = WorkerProcess(tmp_path / "worker.log", concurrency=concurrency)
    try:
        yield worker
    finally:
        worker.stop()
        module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "worker.log", ARTIFACTS / f"{module.replace('_', '-')}-worker.log")


def show_setting(page, selector: str) -> None:
    """Bring a lab page's settings field into view as a person would: open "All settings"
    (lesson mode) and the field's group when they are closed, by clicking their summaries."""
    settings = page.locator("#all-settings")
    if settings.count() and not settings.evaluate("d => d.open"):
        settings.locator("> summary").click()
    group = page.locator(selector).locator("xpath=ancestor::details[1]")
    if group.count() and not group.evaluate("d => d.open || d.id === 'all-settings'"):
        group.locator("> summary").click()
