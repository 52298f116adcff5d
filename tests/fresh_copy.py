"""A fresh copy of the repository for tests of the README's commands (make run, make test).

- :func:`copy_repository`: the committed tree (HEAD), as a fresh clone has it.
- :func:`linked_venv`: a ``.venv`` in the copy whose packages are this test run's (a ``.pth``
  file), with the copy's own bootstrap stamps written: the commands skip pip, so a test takes
  seconds, not minutes, and never installs into a shared environment. (The ``make run`` test
  builds a real venv from scratch instead.)
- :func:`processes_under`: live processes whose command line or working directory is in the
  copy: what a command left behind.
- :func:`clean_environment`: a new user's environment: no project variables, no venv on PATH.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_repository(target: Path) -> None:
    """The committed tree (HEAD), exactly what a fresh clone has: neither the work in progress
    of a shared working tree nor ignored files (``.venv``, ``db/``) come along."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")


def linked_venv(copy: Path) -> Path:
    """``copy/.venv`` using this interpreter's installed packages; returns its python."""
    target = copy / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    python = target / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "_test_run_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for script in ("celery", "daphne", "pytest", "ruff"):
        source = Path(sys.executable).parent / script
        if source.exists():
            (target / "bin" / script).symlink_to(source)
    subprocess.run(
        [python, "-c", "import sys; sys.path.insert(0, 'scripts'); import bootstrap; "
         "bootstrap.mark_installed(bootstrap.DEV_REQUIREMENTS)"],
        cwd=copy, check=True,
    )  # fmt: skip
    return python


def processes_under(marker: str) -> list[tuple[int, str]]:
    """Live processes whose command line or working directory mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            state = next(
                line for line in (entry / "status").read_text().splitlines()
                if line.startswith("State:")
            )  # fmt: skip
        except (OSError, StopIteration):
            continue
        if "Z" in state.split()[1]:
            continue  # a zombie is already dead
        if marker in cmdline or cwd.startswith(marker):
            found.append((int(entry.name), cmdline.strip()))
    return found


def pid_alive(pid: int) -> bool:
    try:
        state = next(
            line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("State:")
        )  # fmt: skip
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


def clean_environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "LAB_", "REDIS_", "DATABASE_", "PYTEST", "CELERY_"))
        and k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "ENGINE_TEST_REDIS_URL"}
    }
    # As a new user's shell: no project venv on PATH.
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    return env


def have_make() -> bool:
    return shutil.which("make") is not None
