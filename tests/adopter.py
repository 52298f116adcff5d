"""Run a command so that every process it starts stays findable: ``adopter.py STATUS CMD...``.

This process makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process the
command starts that outlives its parent (a server left behind, a daemon that forked twice,
one in a session of its own) is re-parented here, not to init, so it is a descendant of this
process whatever it did. The command runs in a session of its own; its pid, then its exit
code, are written to STATUS (``pid N``, ``exit N``). This process reaps every child and stays
until its stdin closes, so that the test can look for descendants after the command exited
(tests/leftovers.py); then it SIGKILLs what is left and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    status, cmd = Path(sys.argv[1]), sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    child = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL)
    status.write_text(f"pid {child.pid}\n")
    done = False
    while True:
        try:
            while True:
                pid, code = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == child.pid and not done:
                    done = True
                    with status.open("a") as out:
                        out.write(f"exit {os.waitstatus_to_exitcode(code)}\n")
        except ChildProcessError:
            pass
        ready, _, _ = select.select([sys.stdin], [], [], 0.05)
        if ready and not sys.stdin.buffer.read1(4096):
            break  # the test is done looking
    for entry in Path("/proc").iterdir():  # whatever was left behind: not past this point
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid():
                with contextlib.suppress(OSError):
                    os.killpg(int(entry.name), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)


if __name__ == "__main__":
    main()
