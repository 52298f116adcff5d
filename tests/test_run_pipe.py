"""`make run | tee lab.log`, then Ctrl-C: the terminal's SIGINT kills the reader of the pipe
as well, and the run command's next status line hits a closed pipe. It must still stop every
process it started (the worker, its journal writer, daphne, Redis).

Reproduced on a fresh copy (its venv borrows this run's packages, tests/fresh_copy.py) as
``python3 scripts/run_lab.py 2>&1 | tee lab.log``: once the lab runs, ``tee`` is killed
first (in a terminal, Ctrl-C reaches both; here the order is made certain), then SIGINT
goes to the script's process group, as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.fresh_copy import clean_environment, copy_repository, linked_venv, processes_under

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 60
READY_LINE = "Failure Lab is running at"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(START_TIMEOUT_S + STOP_TIMEOUT_S + 60)
def test_ctrl_c_with_stdout_a_closed_pipe_still_stops_every_child(tmp_path):
    copy = tmp_path / "fresh-failure-lab"
    copy.mkdir()
    copy_repository(copy)
    linked_venv(copy)
    marker = str(copy)
    log = tmp_path / "lab.log"
    env = clean_environment()
    env.update(
        LAB_PORT=str(free_port()),
        LAB_PRIVATE_REDIS="1",
        LAB_DATA_DIR=str(copy / "db"),
        LAB_WORKER_CONCURRENCY="4",
    )
    # The shell, the run script and tee are the "terminal's" foreground process group.
    proc = subprocess.Popen(
        ["sh", "-c", f"python3 scripts/run_lab.py 2>&1 | tee '{log}' > /dev/null"],
        cwd=copy, env=env, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in (log.read_text() if log.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the lab did not come up ({proc.returncode}):\n{log.read_text()}")
            time.sleep(0.5)
        running = processes_under(marker)
        names = " ".join(cmd for _, cmd in running)
        assert "celery" in names and "daphne" in names and "run_lab.py" in names, names
        assert any("redis" in cmd for _, cmd in running), names
        (tee,) = [pid for pid, cmd in running if cmd.startswith("tee ")]
        os.kill(tee, signal.SIGKILL)  # nobody reads the run script's output any more
        while any(pid == tee for pid, _ in processes_under(marker)):
            time.sleep(0.05)

        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while processes_under(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = processes_under(marker)
        assert left == [], f"left running after Ctrl-C: {left}"
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in processes_under(marker):  # only what this test started
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
