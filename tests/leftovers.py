"""Finding the processes a command left behind, for the tests that stop commands midway.

:class:`Adopted` runs the command under tests/adopter.py, a child subreaper: whatever the
command starts stays a descendant of the adopter even after the command exits (a process
that outlives its parent is re-parented to the adopter, not to init), also when it moved to a
process group or session of its own. Two more nets, for what a bug might hide from the first:

- :func:`marked`: the command runs with ``LAB_TEST_RUN_MARK=<a fresh uuid>`` in its
  environment, which every child inherits (also through ``dict(os.environ)``); a scan of
  ``/proc/<pid>/environ`` finds them. Not every process keeps that page readable: a
  ``redis-server`` writes its process title over it.
- :func:`in_group`: what is still in the command's own process group or session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ADOPTER = Path(__file__).resolve().parent / "adopter.py"

MARK = "LAB_TEST_RUN_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


def _alive(entry: Path) -> bool:
    try:
        status = (entry / "status").read_text()
    except OSError:
        return False
    state = next((line for line in status.splitlines() if line.startswith("State:")), "")
    return "Z" not in state.split()[1:2]  # a zombie is already dead


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def marked(mark: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``LAB_TEST_RUN_MARK=mark``: (pid, cmdline)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(entry):
            found.append((int(entry.name), _cmdline(entry).strip()))
    return found


def in_group(leader: int) -> list[tuple[int, str]]:
    """Live processes whose process group or session is ``leader``'s: (pid, cmdline)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pgrp, session = int(fields[2]), int(fields[3])
        if leader in (pgrp, session) and _alive(entry):
            found.append((int(entry.name), _cmdline(entry).strip()))
    return found


def descendants(ancestor: int) -> list[tuple[int, str]]:
    """Live descendants of ``ancestor``: (pid, cmdline)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found = []
    for pid in parents:
        up, hops = parents.get(pid), 0
        while up and up != ancestor and hops < 64:
            up, hops = parents.get(up), hops + 1
        if up == ancestor and _alive(Path(f"/proc/{pid}")):
            found.append((pid, _cmdline(Path(f"/proc/{pid}")).strip()))
    return found


class Adopted:
    """A command run under tests/adopter.py (see the module docstring), its output to
    ``log``. ``pid`` is the command's: its process group and session."""

    def __init__(self, cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path,
                 status: Path) -> None:  # fmt: skip
        self.mark = env[MARK]
        self.status = status
        with log.open("ab") as out:
            self.adopter = subprocess.Popen(
                [sys.executable, str(ADOPTER), str(status), *cmd], cwd=cwd, env=env,
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self._lines():
            if self.adopter.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the adopter did not start the command: {log.read_text()}")
            time.sleep(0.02)
        self.pid = int(self._lines()[0].split()[1])

    def _lines(self) -> list[str]:
        try:
            return self.status.read_text().splitlines()
        except FileNotFoundError:
            return []

    def poll(self) -> int | None:
        """The command's exit code once it exited (a signal: minus its number)."""
        ended = [line for line in self._lines() if line.startswith("exit ")]
        return int(ended[0].split()[1]) if ended else None

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def running(self) -> list[tuple[int, str]]:
        """What runs now under the command (the command itself not counted)."""
        found = set(descendants(self.adopter.pid)) | set(marked(self.mark))
        return sorted(p for p in found if p[0] not in (self.pid, self.adopter.pid))

    def left_behind(self, grace: float = 15.0) -> list[tuple[int, str]]:
        """What still runs after the command exited, polled for ``grace`` seconds (a process
        the command killed may take a moment to go)."""
        deadline = time.monotonic() + grace
        while True:
            found = sorted(set(self.running()) | set(in_group(self.pid)))
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def close(self) -> None:
        """Kill the command if it still runs, then the adopter (which kills what is left)."""
        if self.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        kill_all(self.running())
        with contextlib.suppress(OSError):
            self.adopter.stdin.close()
        try:
            self.adopter.wait(30)
        except subprocess.TimeoutExpired:
            self.adopter.kill()
            self.adopter.wait()


def kill_all(found: list[tuple[int, str]]) -> None:
    """SIGKILL what a failed test found, so one failure does not leak into the machine."""
    for pid, _ in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
