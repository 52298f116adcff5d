"""Create the project's virtual environment and install the requirements into it.

Standard library only: this runs with whatever ``python3`` the machine has, before anything
is installed. Shared by ``make run`` (scripts/run_lab.py: requirements.txt, the runtime) and
``make test`` (scripts/test.py: requirements-dev.txt, the runtime plus tests, lint and
benchmarks). The environment lives in ``.venv`` (LAB_VENV to change). A requirements file is
reinstalled only when it, or a file it includes with ``-r``, changed since its last successful
install (a hash per file is kept inside the venv).
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
DEV_REQUIREMENTS = ROOT / "requirements-dev.txt"


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


def stamp_path(requirements: Path, directory: Path | None = None) -> Path:
    """Where the hash of ``requirements``' last successful install is kept."""
    return (directory or venv_dir()) / f".{requirements.stem}.sha256"


def requirements_digest(requirements: Path) -> str:
    """A hash of ``requirements`` and of every file it includes (``-r other.txt``)."""
    digest = hashlib.sha256()
    seen: set[Path] = set()

    def add(path: Path) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.add(path)
        content = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + content + b"\0")
        for line in content.decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in {"-r", "--requirement"}:
                add(path.parent / parts[1])

    add(requirements)
    return digest.hexdigest()


def is_installed(requirements: Path, directory: Path | None = None) -> bool:
    stamp = stamp_path(requirements, directory)
    return stamp.exists() and stamp.read_text().strip() == requirements_digest(requirements)


def mark_installed(requirements: Path, directory: Path | None = None) -> None:
    """Record ``requirements`` (and what it includes) as installed."""
    files = [requirements]
    if requirements.resolve() == DEV_REQUIREMENTS.resolve():
        files.append(REQUIREMENTS)  # included by the dev file: installed with it
    for path in files:
        stamp_path(path, directory).write_text(requirements_digest(path) + "\n")


def ensure_venv(dev: bool = False) -> Path:
    """The venv's python, after creating the venv and installing requirements.txt (with
    ``dev``: requirements-dev.txt, which includes it) if needed."""
    directory = venv_dir()
    python = venv_python(directory)
    requirements = DEV_REQUIREMENTS if dev else REQUIREMENTS
    if not python.exists():
        # This file runs on the machine's python3, which may be older than the project's.
        if sys.version_info < (3, 11):  # noqa: UP036
            sys.exit(f"Python 3.11 or newer is needed (this is {sys.version.split()[0]}).")
        _say(f"creating the virtual environment in {directory}")
        venv.EnvBuilder(with_pip=True, clear=False).create(directory)
    if not is_installed(requirements, directory):
        _say(f"installing {requirements.name} (the first time takes a few minutes)")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-qq",
             "-r", str(requirements)],
            check=True,
        )  # fmt: skip
        mark_installed(requirements, directory)
    return python


def reexec_in_venv(script: str, *, dev: bool = False) -> None:
    """Make sure the venv is ready (``dev``: with requirements-dev.txt), then replace this
    process with ``script`` run by the venv's python (same arguments). Returns only if
    already running inside the venv."""
    python = ensure_venv(dev=dev)
    if running_in_venv():
        return
    os.execv(str(python), [str(python), script, *sys.argv[1:]])  # noqa: S606 (fixed argv)


if __name__ == "__main__":
    print(ensure_venv(dev="--dev" in sys.argv[1:]))
