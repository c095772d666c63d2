"""The public ``lmserde`` namespace: one lazily loaded export table, and ``python -m lmserde``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lmserde
import pytest

STUB = Path(lmserde.__file__).with_name("__init__.pyi")


def _stub_exports() -> dict[str, str]:
    """Name -> module of every ``from .module import name as name`` line of the stub."""
    table: dict[str, str] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 and node.module, ast.unparse(node)
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name}: a stub re-export is `X as X`"
                table[alias.name] = f"lmserde.{node.module}"
    return table


def test_the_stub_is_the_export_table() -> None:
    table = _stub_exports()
    assert len(table) > 40
    assert sorted(lmserde.__all__) == sorted(table)
    assert sorted(dir(lmserde)) == sorted(table)


@pytest.mark.parametrize("name", sorted(_stub_exports()))
def test_every_exported_name_resolves_to_its_module(name: str) -> None:
    module = _stub_exports()[name]
    value = getattr(lmserde, name)
    assert value is getattr(sys.modules[module], name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        lmserde.NoSuchThing  # noqa: B018


def test_import_lmserde_does_not_import_torch() -> None:
    code = ("import sys, lmserde; lmserde.ObjectKey; lmserde.hookimpl; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_python_dash_m_lmserde_runs_the_cli() -> None:
    version = subprocess.run([sys.executable, "-m", "lmserde", "--version"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"lmserde {lmserde.__version__}"
    listing = subprocess.run([sys.executable, "-m", "lmserde", "plugins"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert listing.returncode == 0, listing.stderr
    assert "identity" in listing.stdout
    usage = subprocess.run([sys.executable, "-m", "lmserde", "no-such-command"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert usage.returncode == 2
