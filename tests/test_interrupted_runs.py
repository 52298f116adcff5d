"""A test run stopped midway leaves no server behind.

tests/integration/interrupt_probe.py starts the integration fixtures' servers (a worker
process, a daphne process, a redis-server of its own) and waits. Once they run:

- ``make test`` (on a fresh copy: scripts/test.py with its private redis-server) gets
  SIGTERM in its process group, as ``timeout`` sends it: make forwards it to scripts/test.py,
  which tells pytest to stop (one SIGINT), waits for its fixtures to stop their servers, then
  stops its own Redis;
- pytest run directly gets SIGTERM: tests/conftest.py turns it into the KeyboardInterrupt
  after which pytest tears the fixtures down.

Each run happens under tests/adopter.py (tests/leftovers.py): whatever it started stays its
descendant, whichever process group or session it moved to, so none can hide after the exit.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.fresh_copy import clean_environment, copy_repository, have_make, linked_venv
from tests.leftovers import MARK, Adopted, new_mark

ROOT = Path(__file__).resolve().parent.parent
PROBE = "tests/integration/interrupt_probe.py"
#: Generous: on a loaded 2-core machine pytest's start, the test database and a worker take a
#: while; stopping waits up to 20 s for each server.
UP_TIMEOUT_S = 240
STOP_TIMEOUT_S = 180


def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def interrupt_once_up(run: Adopted, probe: Path, log: Path, signal_group: bool = True) -> int:
    """Wait for the probe's servers, SIGTERM the command's group, wait for its exit; returns
    its exit code (fails the test on a timeout)."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not probe.exists():
        if run.poll() is not None:
            pytest.fail(f"the run ended ({run.poll()}) before its servers ran:\n"
                        f"{log.read_text()[-4000:]}")  # fmt: skip
        if time.monotonic() > deadline:
            pytest.fail(f"the probe's servers did not run in {UP_TIMEOUT_S} s:\n"
                        f"{log.read_text()[-4000:]}")  # fmt: skip
        time.sleep(0.2)
    running = [cmd for _, cmd in run.running()]
    for name in ("celery", "daphne", "redis-server"):
        assert any(name in cmd for cmd in running), (name, running)
    time.sleep(1)
    if signal_group:
        os.killpg(run.pid, signal.SIGTERM)
    else:
        os.kill(run.pid, signal.SIGTERM)
    code = run.wait(STOP_TIMEOUT_S)
    if code is None:
        pytest.fail(f"still running {STOP_TIMEOUT_S} s after SIGTERM:\n{log.read_text()[-4000:]}")
    return code


@pytest.mark.timeout(UP_TIMEOUT_S + STOP_TIMEOUT_S + 120)
def test_make_test_stopped_by_sigterm_in_its_first_integration_test_leaves_nothing(tmp_path):
    if not have_make():
        pytest.fail("make is not installed")
    copy = tmp_path / "fresh-failure-lab"
    copy.mkdir()
    copy_repository(copy)
    linked_venv(copy)
    probe = tmp_path / "probe-up"
    env = clean_environment()
    env.update(
        {MARK: new_mark(), "LAB_INTERRUPT_PROBE": str(probe), "LAB_SKIP_POSTGRES": "1",
         "LAB_SKIP_BROWSER_TESTS": "1", "REDIS_URL": f"redis://127.0.0.1:{unused_port()}"}
    )  # fmt: skip
    log = tmp_path / "make-test.log"
    run = Adopted(["make", "test", f"ARGS={PROBE}"], env=env, cwd=copy, log=log,
                  status=tmp_path / "status")  # fmt: skip
    left = []
    try:
        code = interrupt_once_up(run, probe, log)
        left = run.left_behind()
    finally:
        run.close()
    output = log.read_text()
    assert not left, f"left running: {left}\n{output[-4000:]}"
    assert code != 0, output[-4000:]
    assert "STARTED a private redis-server" in output, output[-4000:]
    assert "interrupted: letting pytest stop its servers" in output, output[-4000:]
    assert "stopping a private Redis" in output, output[-4000:]


@pytest.mark.timeout(UP_TIMEOUT_S + STOP_TIMEOUT_S + 60)
def test_pytest_stopped_by_sigterm_stops_its_fixtures_servers(tmp_path):
    probe = tmp_path / "probe-up"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "PYTEST_CURRENT_TEST"}}
    env.update(
        {MARK: new_mark(), "LAB_INTERRUPT_PROBE": str(probe), "PYTHONUNBUFFERED": "1",
         # Its own test database and Redis databases: this run's are in use.
         "LAB_TEST_DB_NAME": str(tmp_path / "test_db.sqlite3"), "LAB_TEST_REDIS_DB_BASE": "12"}
    )  # fmt: skip
    log = tmp_path / "pytest.log"
    run = Adopted([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", PROBE], env=env,
                  cwd=ROOT, log=log, status=tmp_path / "status")  # fmt: skip
    left = []
    try:
        code = interrupt_once_up(run, probe, log, signal_group=False)
        left = run.left_behind()
    finally:
        run.close()
    output = log.read_text()
    assert not left, f"left running: {left}\n{output[-4000:]}"
    assert code == 2, output[-4000:]  # pytest's "interrupted"
    assert "KeyboardInterrupt" in output and "SIGTERM received" in output, output[-4000:]
