"""Core is layered: no import cycle, and no module imports from a layer above its own.

The layers are the import-linter contracts in the root ``pyproject.toml`` (``nox -s lint`` runs
``lint-imports`` on them; docs/architecture.md, "Layers", explains them). This test checks the
same contracts without import-linter, from a static read of every ``import`` statement of
``core/src/lmserde`` (top-level, ``TYPE_CHECKING`` and function-level ones alike, relative ones
resolved), so that a lazy import can hide neither a cycle nor an upward dependency.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "core" / "src"
PACKAGE = "lmserde"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of the package that importing ``name`` reads (its longest known prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(module: str, path: Path) -> Iterator[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else base), node.lineno


def _edges() -> dict[tuple[str, str], str]:
    """``(importer, imported) -> "path:line"`` of the first statement, for every internal import."""
    edges: dict[tuple[str, str], str] = {}
    for module, path in MODULES.items():
        for name, line in _imported_names(module, path):
            if name != PACKAGE and not name.startswith(PACKAGE + "."):
                continue
            target = _resolve(name)
            if target is not None and target != module:
                edges.setdefault((module, target), f"{path.relative_to(ROOT)}:{line}")
    return edges


EDGES = _edges()


def _child_of(container: str, module: str) -> str | None:
    """The direct child of ``container`` that holds ``module`` (``None`` outside it, or for the
    container itself)."""
    if not module.startswith(container + "."):
        return None
    return module[len(container) + 1:].split(".")[0]


def _sibling_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or ``None``."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def _packages() -> list[str]:
    return sorted(m for m, p in MODULES.items() if p.name == "__init__.py")


def _cycle_in(package: str) -> list[str] | None:
    graph: dict[str, set[str]] = {}
    for importer, imported in EDGES:
        a, b = _child_of(package, importer), _child_of(package, imported)
        if a is not None and b is not None and a != b:
            graph.setdefault(a, set()).add(b)
    return _sibling_cycle(graph)


def test_the_graph_is_read_with_lazy_and_type_checking_imports() -> None:
    """The reader sees the imports a layering check must see (guards the checks below)."""
    reads = {(a, b) for a, b in EDGES}
    assert ("lmserde.spec", "lmserde.processor") in reads  # inside SerdeSpec.create_processor
    assert ("lmserde.base", "lmserde.task_outcome") in reads  # under TYPE_CHECKING
    assert ("lmserde.l2.adapters.fault", "lmserde.l2.build") in reads  # inside a factory
    assert ("lmserde.l2.contract.inner_delegation", "lmserde.l2.contract.interface") in reads


@pytest.mark.parametrize("package", _packages())
def test_no_import_cycle_between_the_modules_of_a_package(package: str) -> None:
    """No two modules (or sub-packages, counted with everything inside them) of one package
    import each other, directly or round a longer circle."""
    cycle = _cycle_in(package)
    assert cycle is None, (
        f"import cycle in {package}: {' -> '.join(cycle or [])}; imports: "
        + "; ".join(f"{a} -> {b} ({where})" for (a, b), where in sorted(EDGES.items())
                    if _child_of(package, a) in (cycle or []) and _child_of(package, b) in (cycle or [])
                    and _child_of(package, a) != _child_of(package, b)))


def _layer_contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return [c for c in contracts if c["type"] == "layers"]


def _parse_layers(layers: list[str]) -> list[tuple[set[str], bool]]:
    """``(names, independent)`` per layer, top first: ``a | b`` are independent siblings (they
    may not import each other), ``a : b`` are siblings that may."""
    parsed = []
    for layer in layers:
        independent = "|" in layer
        names = {n.strip() for n in layer.replace("|", ":").split(":") if n.strip()}
        parsed.append((names, independent))
    return parsed


def _violations(contract: dict[str, object]) -> list[str]:
    layers = _parse_layers(list(contract["layers"]))  # type: ignore[arg-type]
    ignored = {tuple(p.strip() for p in rule.split("->"))
               for rule in contract.get("ignore_imports", [])}  # type: ignore[union-attr]
    index = {name: i for i, (names, _) in enumerate(layers) for name in names}
    problems: list[str] = []
    for container in contract["containers"]:  # type: ignore[union-attr]
        children = {c for m in MODULES if (c := _child_of(container, m)) is not None}
        if contract.get("exhaustive"):
            problems += [f"{container}.{c} is in no layer" for c in sorted(children - set(index))]
        for (importer, imported), where in sorted(EDGES.items()):
            a, b = _child_of(container, importer), _child_of(container, imported)
            if a is None or b is None or a == b or (importer, imported) in ignored:
                continue
            if a not in index or b not in index:
                continue
            if index[a] > index[b]:
                problems.append(f"{importer} imports {imported}, a layer above it ({where})")
            elif index[a] == index[b] and layers[index[a]][1]:
                problems.append(f"{importer} imports {imported}, an independent sibling ({where})")
    return problems


@pytest.mark.parametrize("contract", _layer_contracts(), ids=lambda c: str(c["id"]))
def test_no_module_imports_from_a_layer_above_its_own(contract: dict[str, object]) -> None:
    assert contract.get("exhaustive") is True  # a new module has to be placed in a layer
    problems = _violations(contract)
    assert not problems, "\n".join(problems)


def test_at_most_one_import_runs_up_a_floor() -> None:
    """The contracts may excuse one upward import, no more (docs/architecture.md names it), and
    the excused import exists (a stale exception would hide the next one)."""
    excused = [(c["id"], rule) for c in _layer_contracts()
               for rule in c.get("ignore_imports", [])]  # type: ignore[union-attr]
    assert len(excused) <= 1, excused
    for _, rule in excused:
        importer, imported = (p.strip() for p in rule.split("->"))
        assert (importer, imported) in EDGES, f"excused import {rule} no longer exists"



@pytest.mark.parametrize(("old_home", "name", "home"), [
    ("lmserde.spec", "SerdePair", "lmserde.serde_pair"),
    ("lmserde.spec", "SerdePairFactory", "lmserde.serde_pair"),
    ("lmserde.spec", "SerdeSizeContract", "lmserde.size_contract"),
    ("lmserde.processor", "TaskOutcome", "lmserde.task_outcome"),
    ("lmserde.base", "Serializer", "lmserde.transforms"),
    ("lmserde.base", "Deserializer", "lmserde.transforms"),
    ("lmserde.l2.discovery.spec", "L2AdapterSpec", "lmserde.adapter_spec"),
    ("lmserde", "SerdePair", "lmserde.serde_pair"),
    ("lmserde", "SerdeSizeContract", "lmserde.size_contract"),
    ("lmserde", "TaskOutcome", "lmserde.task_outcome"),
    ("lmserde", "Serializer", "lmserde.transforms"),
    ("lmserde.l2", "L2AdapterSpec", "lmserde.adapter_spec"),
])
def test_a_name_moved_down_keeps_its_old_import_path(old_home: str, name: str, home: str) -> None:
    """Moving a name down a layer kept every import path that worked before (same object)."""
    assert getattr(importlib.import_module(old_home), name) is \
        getattr(importlib.import_module(home), name)
