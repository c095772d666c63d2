"""``lmserde plugins``: sorted rows, whole descriptions in --json, facts known without importing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lmserde.cli.main import main

LONG = ("A deliberately long summary that goes on well past the width of one table cell, so the "
        "table must shorten it while the JSON keeps every word")


def _install(plugin_site: Callable[..., Path], name: str, summary: str) -> Path:
    return plugin_site(f"lmserde-testplugin-{name}", "1.0", summary=summary,
                       entry_points={"lmcache.serde": {name: f"lmserde_testplugin_{name}:SPEC"}},
                       modules={f"lmserde_testplugin_{name}": "raise ImportError('not loaded')\n"})


def test_rows_are_sorted_and_json_descriptions_are_whole(
        plugin_site: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    _install(plugin_site, "zz_last", LONG)
    _install(plugin_site, "aa_first", "short")
    assert main(["plugins", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in data["serdes"]]
    assert names == sorted(names) and {"aa_first", "zz_last", "identity"} <= set(names)
    assert [a["name"] for a in data["l2_adapters"]] == sorted(a["name"] for a in data["l2_adapters"])
    serdes = {s["name"]: s for s in data["serdes"]}
    assert serdes["zz_last"]["description"] == LONG
    assert (serdes["identity"]["size_contract"], serdes["identity"]["lossy"]) == ("exact", False)
    assert serdes["zz_last"]["size_contract"] is None  # a plugin's facts need --load

    assert main(["plugins"]) == 0
    table = capsys.readouterr().out
    assert LONG not in table and LONG[:40] in table and "…" in table
    assert table.index("aa_first") < table.index("identity") < table.index("zz_last")


def test_no_numpy_warning_from_torch_on_info() -> None:
    """torch imported without NumPy warns on import; the CLI must not print that warning."""
    code = ("import sys; sys.modules['numpy'] = None\n"  # as if NumPy were not installed
            "from lmserde.cli.main import main; sys.exit(main(['info', 'identity']))")
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert "identity" in result.stdout
    assert "NumPy" not in result.stderr and "Warning" not in result.stderr, result.stderr
