"""requirements.txt is the runtime (the Docker image installs only it); requirements-dev.txt
adds tests, lint and benchmarks. Nothing the lab's processes import may be dev-only."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pinned(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.sub(r"[-_.]+", "-", line.split("==")[0]).lower())
    return names


def imported_top_level(*dirs: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for directory in dirs:
        for path in (ROOT / directory).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    mods = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    found.setdefault(mod.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_dev_requirements_include_the_runtime_and_do_not_repeat_it():
    dev_file = (ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev_file.splitlines()
    assert not pinned(ROOT / "requirements.txt") & pinned(ROOT / "requirements-dev.txt")


def test_the_lab_imports_no_dev_only_package():
    runtime = pinned(ROOT / "requirements.txt")
    dev_only = pinned(ROOT / "requirements-dev.txt")
    distributions = packages_distributions()
    offenders = {}
    for module, where in imported_top_level("labs", "lab_project").items():
        if module in sys.stdlib_module_names or module in {"labs", "lab_project"}:
            continue
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [])}
        assert dists, f"{where} imports {module}, which no installed package provides"
        if not dists & runtime or dists & dev_only:
            offenders[module] = where
    assert not offenders, f"dev-only imports in the runtime code: {offenders}"


def test_the_dockerfile_installs_only_the_runtime():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r requirements.txt" in dockerfile
    assert "requirements-dev" not in dockerfile
