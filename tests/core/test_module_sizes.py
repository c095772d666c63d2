"""Small modules: a module of core over 400 lines says at its top why it is one module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "src" / "lmserde"
LIMIT = 400


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_a_long_module_states_why(path: Path) -> None:
    text = path.read_text()
    if text.count("\n") <= LIMIT:
        return
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert f"over {LIMIT} lines because" in doc, (
        f"{path.relative_to(CORE)} has {text.count(chr(10))} lines: split it, or say in its "
        f"docstring why it is 'over {LIMIT} lines because ...'")
