"""Plugins in this repository use only the public lmserde API; the checker catches violations."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checker():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_plugin_imports",
                                                  ROOT / "tools" / "check_plugin_imports.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_plugin_imports"] = module
    spec.loader.exec_module(module)
    return module


def test_repository_plugins_import_only_public_names() -> None:
    checker = _checker()
    problems = [p for root in sorted((ROOT / "plugins").glob("*/src"))
                for p in checker.violations(root)]
    assert problems == []


def test_checker_reports_private_imports(tmp_path: Path) -> None:
    checker = _checker()
    (tmp_path / "bad.py").write_text(
        "import lmserde.memory\nfrom lmserde._version import __version__\n"
        "from lmserde import _version\nfrom lmserde import Serializer\nimport lmserde.testing\n")
    found = checker.violations(tmp_path)
    assert len(found) == 3
    assert any("lmserde.memory" in f for f in found) and any("_version" in f for f in found)
