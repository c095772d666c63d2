"""docs/writing-an-adapter.md: the SQLite adapter shown there passes the public adapter kit."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from lmserde.l2 import L2AdapterInterface
from lmserde.testing import L2AdapterConformance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging"))
from doc_examples import doc_example


def _doc_module() -> types.ModuleType:
    module = types.ModuleType("acme_l2_sqlite_doc_example")
    exec(compile(doc_example("docs/writing-an-adapter.md", "sqlite-adapter"),
                 "docs/writing-an-adapter.md", "exec"), module.__dict__)
    return module


DOC = _doc_module()


class TestDocSQLiteAdapterConformance(L2AdapterConformance):
    def make_adapter(self, tmp_path: Path) -> L2AdapterInterface:
        return DOC.SQLiteL2Adapter(str(tmp_path / "kv.db"))


def test_doc_spec_builds_the_adapter(tmp_path: Path) -> None:
    spec = DOC.SQLITE_ADAPTER_SPEC
    options = spec.validate("sqlite", {"path": str(tmp_path / "a.db")})
    adapter = spec.factory(options, None)
    try:
        assert adapter.report_status()["type"] == "sqlite"
    finally:
        adapter.close()
