"""The linter's rules (pyproject.toml, ``[tool.ruff]``) hold for the whole tree: ``make lint``
runs the same check, and this test makes it part of ``make test``, so a warning cannot land
unseen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes_on_the_whole_tree():
    ruff = Path(sys.executable).with_name("ruff")
    assert ruff.exists(), f"ruff is not installed next to {sys.executable} (requirements-dev.txt)"
    result = subprocess.run(
        [str(ruff), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
