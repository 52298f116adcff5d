"""Every server process the tests start (redis-server, ``celery worker``, daphne).

Each starts as the leader of a process group of its own (a group signal also reaches what it
forks: a worker's journal-writer process) and is registered here, with the code ``make run``
and ``make test`` use (scripts/services.py's :class:`Processes`). Its fixture stops it; and
whatever is still registered when the test run ends is stopped then, however the run ends:
tests/conftest.py turns SIGTERM and SIGHUP into the KeyboardInterrupt that pytest already
stops for (it then tears every fixture down), and stops the rest at ``pytest_unconfigure``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import services  # noqa: E402  (scripts/services.py)

sys.path.remove(str(ROOT / "scripts"))

STOP_TIMEOUT_S = 20.0

_started = services.Processes(services.Output("tests"))


def start(name: str, cmd: list[str], *, env: dict[str, str] | None = None, **popen):
    """Start ``cmd`` in a process group of its own, registered until it is stopped."""
    popen.setdefault("cwd", ROOT)
    return _started.start(name, cmd, env, quiet=True, **popen)


def stop(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to its group, a wait, SIGKILL for what is left; then forgotten."""
    _started.stop(proc, timeout)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL to its group (no shutdown handler runs: a crash); then forgotten."""
    _started.stop(proc, STOP_TIMEOUT_S, signal.SIGKILL)


def running() -> list[str]:
    """The names of the servers still registered."""
    return [name for name, _proc, _sig in _started.children]


def stop_all() -> None:
    """Stop every server still registered (the end of the run)."""
    _started.stop_all()
