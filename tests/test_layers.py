"""The layering of docs/architecture.md, checked on the source: no module imports a higher
layer, and no two modules import each other, directly or round a loop, at module level or
inside a function.

Every import statement counts, function-local ones included (a lazy import is still a
dependency, it only hides the cycle). ``if TYPE_CHECKING:`` imports count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A module may import its own layer and any lower one. A prefix names a
#: module or a package (everything below it).
LAYERS: list[tuple[str, ...]] = [
    ("labs.engine", "lab_project.settings", "lab_project.env", "lab_project.csp",
     "lab_project.redis_pool", "lab_project.static_storage"),
    ("labs.models", "labs.apps", "labs.experiments", "labs.grading", "labs.migrations",
     "lab_project.http_limit", "lab_project.processes", "lab_project.login_limits",
     "labs.journal.kinds"),
    ("labs.journal",),
    ("labs.live", "lab_project.celery", "lab_project.broker"),
    ("labs.presenters",),
    ("labs.selectors",),
    ("labs.services",),
    ("labs.worker",),
    ("labs.forms", "labs.templatetags"),
    ("labs.clicks",),
    ("labs.consumers", "labs.views", "labs.admin"),
    ("labs.urls", "labs.experiments.urls", "labs.routing", "labs.management",
     "lab_project.urls", "lab_project.asgi", "lab_project.wsgi"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found = {}
    for package in ("labs", "lab_project"):
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    del found["labs"]  # holds no code (a test below keeps it so)
    return found


MODULES = project_modules()


#: Packages placed by their own name only (a prefix would place every module below them).
EXACT = {"lab_project": 2}  # its __init__ loads the Celery app, as Celery's Django guide says


def layer_of(module: str) -> int:
    if module in EXACT:
        return EXACT[module]
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} has no layer: add it to LAYERS and docs/architecture.md")
    return best


def imports_of(module: str, path: Path) -> set[str]:
    """The project modules ``module`` imports (``from pkg import mod`` resolves to the module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            # the longest project module that the imported name is, or lives in
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {module: imports_of(module, path) for module, path in MODULES.items()}


def test_the_labs_package_holds_no_code():
    tree = ast.parse((ROOT / "labs" / "__init__.py").read_text())
    assert all(isinstance(node, ast.Expr) for node in tree.body)


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    own = layer_of(module)
    upward = sorted(
        f"{target} (layer {layer_of(target)})"
        for target in GRAPH[module]
        # a package's __init__ may name what is below it; its submodules are checked themselves
        if layer_of(target) > own and not target.startswith(module + ".")
    )
    assert not upward, f"{module} (layer {own}) imports upward: {', '.join(upward)}"


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            # a package importing its own submodules is not a cycle between peers
            if target.startswith(node + "."):
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return components


#: The two tops: what only a web process runs, and what only a worker runs.
WEB = ("labs.views", "labs.consumers", "labs.clicks", "labs.forms")
WORKER = ("labs.worker",)


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(("top", "other"), [(WEB, WORKER), (WORKER, WEB)])
def test_neither_top_imports_the_other(top, other):
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if _within(module, top)
        for target in targets
        if _within(target, other)
    )
    assert not crossing, f"the web and the worker import each other: {', '.join(crossing)}"


def test_below_the_tops_nothing_imports_the_worker():
    """The worker's machinery (hub, writers, run loop) is its own: no shared layer reaches
    into it, so a web process never starts a worker's thread by importing something."""
    below = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if layer_of(module) < layer_of("labs.worker")
        for target in targets
        if _within(target, WORKER)
    )
    assert not below, ", ".join(below)


def test_no_module_is_named_like_a_standard_module_its_neighbours_import():
    """``labs/live/queue.py`` beside modules doing ``import queue`` is how a name gets
    shadowed: no module of the project carries the name of a standard-library module that
    a module of the same package imports."""
    import sys

    clashes = []
    for module, path in MODULES.items():
        name = module.rpartition(".")[2]
        if name not in sys.stdlib_module_names or path.name == "__init__.py":
            continue
        for sibling in path.parent.glob("*.py"):
            tree = ast.parse(sibling.read_text())
            for node in ast.walk(tree):
                names = (
                    [a.name.split(".")[0] for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module.split(".")[0]]
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level
                    else []
                )
                if name in names:
                    clashes.append(f"{module} (imported as stdlib by {sibling.name})")
    assert not clashes, ", ".join(sorted(set(clashes)))


def test_no_import_cycles_even_lazy_ones():
    assert _cycles() == []


def test_the_checker_sees_a_lazy_upward_import(tmp_path):
    """The check itself: a function-local import of a higher layer is found."""
    fake = tmp_path / "labs" / "live" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from labs.views import lab\n    return lab\n")
    found = imports_of("labs.live.fake", fake)
    assert "labs.views.lab" in found
    assert layer_of("labs.views.lab") > layer_of("labs.live.fake")
