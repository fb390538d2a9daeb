"""The project's import graph: no cycles, and every package imports only the layers below it.

Computed with the stdlib `ast` from the source (nothing is imported), so it also sees
imports under `if TYPE_CHECKING:` and inside functions. Two graphs:
- modules, runtime imports only: a cycle here is an import-order accident waiting to happen;
- units (a top-level package's modules and subpackages, e.g. `core.stream`, `core.tiering`),
  every import included: a cycle here means two concerns reach into each other.
`__main__` modules are entry points (`python -m gateway` is an alias of the CLI) and are
left out: nothing imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Lowest first: a package may import the packages before it, never one after it.
LAYERS = ["core", "kafkawire", "gateway", "admin", "kafkaclient", "spark_source", "bridge", "cli"]
PACKAGES = [*LAYERS, "harness"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "__main__.py":
                found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: Iterable[str]) -> list[tuple[str, bool]]:
    """(imported project module, runtime?) for every import statement in the file."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            type_only.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import mod` imports pkg.mod when that is a module.
            targets = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A module's own packages are imported before it anyway: not a dependency.
            if target and not (name == target or name.startswith(target + ".")):
                found.append((target, id(node) not in type_only))
    return found


def _unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = _modules()
    runtime: dict[str, set[str]] = {m: set() for m in modules}
    units: dict[str, set[str]] = {}
    for name, path in modules.items():
        units.setdefault(_unit(name), set())
        for target, at_runtime in _imports(name, path, modules):
            if at_runtime:
                runtime[name].add(target)
            if _unit(target) != _unit(name):
                units[_unit(name)].add(_unit(target))
    return runtime, units


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of two or more nodes (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_cycles() -> None:
    runtime, _units = _graphs()
    assert _cycles(runtime) == []


def test_no_cycles_between_units() -> None:
    _runtime, units = _graphs()
    assert _cycles(units) == []


@pytest.mark.parametrize("package", LAYERS)
def test_layers(package: str) -> None:
    """core is below everything; kafkawire (the wire codec) is shared by the server and the
    client; gateway (the Kafka server) knows nothing of the CLI, the admin API or the internal
    client; harness (tests) is imported by no package."""
    _runtime, units = _graphs()
    allowed = set(LAYERS[: LAYERS.index(package) + 1])
    wrong = sorted(
        f"{unit} -> {target}"
        for unit, targets in units.items()
        if unit.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in allowed
    )
    assert wrong == []


def test_graph_is_read() -> None:
    """Guards the test itself: the known edges are found."""
    runtime, units = _graphs()
    assert "core.recordbatch" in runtime["core.stream.append"]
    assert "core.stream" in units["core.tiering"]
    assert "core.api" in units["gateway.handlers"]
    assert "kafkawire.codec" in units["kafkaclient.client"]
