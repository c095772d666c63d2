"""The layout shows the layers: no module of core imports from a layer above its own.

Checked statically (every ``import`` / ``from`` statement, function-level ones included), so a
lazy import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "src" / "lmserde"

#: Inside ``lmserde.l2``: each part may import itself and the parts before it.
L2_ORDER = ["contract", "discovery", "adapters", "serde", "split", "build"]
#: The one sanctioned exception: the fault adapter wraps an adapter given as a spec (which may
#: itself carry a serde), so its factory calls the builder when it runs — composition, at build
#: time, never imported at module load.
COMPOSES_BY_SPEC = {("adapters/fault.py", "lmserde.l2.build")}
#: Top-level packages that nothing below them may import.
UPPER = {"cli": set(), "bench": {"cli"}, "lmcache": {"cli", "bench"}}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return [n for n in names if n == "lmserde" or n.startswith("lmserde.")]


def _l2_part(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["lmserde", "l2"]:
        return None
    return "build" if parts[2] == "build" else parts[2]


@pytest.mark.parametrize("path", sorted((CORE / "l2").rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_l2_parts_only_import_themselves_and_lower_parts(path: Path) -> None:
    rel = path.relative_to(CORE / "l2")
    if rel.parts == ("__init__.py",):
        return  # the package re-exports every part
    own = "build" if rel.parts[0] == "build.py" else rel.parts[0]
    allowed = set(L2_ORDER[: L2_ORDER.index(own) + 1])
    upward = [m for m in _imports(path) if (_l2_part(m) or own) not in allowed
              and (str(rel), m) not in COMPOSES_BY_SPEC]
    assert not upward, f"{rel} imports from a higher l2 part: {upward}"


@pytest.mark.parametrize("lower", ["l1", "l2", "bench", "lmcache", "testing"])
def test_lower_packages_never_import_the_cli_or_bench(lower: str) -> None:
    forbidden = {"cli", "bench"} - {lower}
    if lower in UPPER:
        forbidden = UPPER[lower]
    for path in sorted((CORE / lower).rglob("*.py")):
        for module in _imports(path):
            parts = module.split(".")
            assert len(parts) < 2 or parts[1] not in forbidden, \
                f"{path.relative_to(CORE)} imports {module}"
