"""Create the project's virtual environment and install requirements.txt into it.

Standard library only: this runs with whatever ``python3`` the machine has, before anything
is installed. Shared by ``make run`` (scripts/run_lab.py) and ``make test`` (scripts/test.py).
The environment lives in ``.venv`` (LAB_VENV to change). requirements.txt is reinstalled only
when it changed since the last successful install (a hash is kept inside the venv).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
STAMP_NAME = ".requirements.sha256"


def venv_dir() -> Path:
    configured = os.environ.get("LAB_VENV", "").strip()
    return Path(configured).resolve() if configured else ROOT / ".venv"


def venv_python(directory: Path | None = None) -> Path:
    directory = directory or venv_dir()
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def running_in_venv(directory: Path | None = None) -> bool:
    directory = (directory or venv_dir()).resolve()
    return Path(sys.prefix).resolve() == directory


def _say(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def ensure_venv() -> Path:
    """The venv's python, after creating the venv and installing requirements if needed."""
    directory = venv_dir()
    python = venv_python(directory)
    if not python.exists():
        # This file runs on the machine's python3, which may be older than the project's.
        if sys.version_info < (3, 11):  # noqa: UP036
            sys.exit(f"Python 3.11 or newer is needed (this is {sys.version.split()[0]}).")
        _say(f"creating the virtual environment in {directory}")
        venv.EnvBuilder(with_pip=True, clear=False).create(directory)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = directory / STAMP_NAME
    if not stamp.exists() or stamp.read_text().strip() != digest:
        _say("installing requirements.txt (the first time takes a few minutes)")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-qq",
             "-r", str(REQUIREMENTS)],
            check=True,
        )  # fmt: skip
        stamp.write_text(digest + "\n")
    return python


def reexec_in_venv(script: str) -> None:
    """Make sure the venv is ready, then replace this process with ``script`` run by the
    venv's python (same arguments). Returns only if already running inside the venv."""
    python = ensure_venv()
    if running_in_venv():
        return
    os.execv(str(python), [str(python), script, *sys.argv[1:]])  # noqa: S606 (fixed argv)


if __name__ == "__main__":
    print(ensure_venv())
