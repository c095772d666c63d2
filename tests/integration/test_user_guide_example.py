"""The user guide's store -> drop from L1 -> load example runs as written (in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
from doc_examples import doc_example
from lmserde.l2 import FRAME_HEADER_BYTES


def _run_example(tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """Run the user guide's example ``name`` in a fresh interpreter; it must exit 0."""
    script = tmp_path / "example.py"
    script.write_text(doc_example("docs/user-guide.md", name))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_store_drop_load_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_fp8", reason="the example uses the fp8 plugin")
    result = _run_example(tmp_path, "store-drop-load")
    lines = result.stdout.splitlines()
    size = 16 * 2 * 8 * 128
    assert lines[0] == f"stored {size + FRAME_HEADER_BYTES} bytes of {2 * size}"  # + the frame
    error = float(lines[1].split()[-1])
    assert 0.0 < error < 0.1
    assert "Warning" not in result.stderr, result.stderr


def test_the_extractor_finds_only_marked_blocks() -> None:
    with pytest.raises(LookupError, match="no example 'nope'"):
        doc_example("docs/user-guide.md", "nope")


def test_change_serde_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_fp8", reason="the example uses the fp8 plugin")
    pytest.importorskip("lmserde_zstd", reason="the example uses the zstd plugin")
    result = _run_example(tmp_path, "change-serde")
    assert result.stdout.splitlines() == ["read_also hits: 4", "migrated: 4 failed: 0",
                                          "hits without read_also: 4"]
    assert "Warning" not in result.stderr, result.stderr


def test_auto_serde_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_zstd", reason="the example chooses between raw bytes and zstd")
    result = _run_example(tmp_path, "auto-serde")
    assert result.stdout.splitlines() == ["stores new objects with: zstd",
                                          "measured store bandwidth under 100 MB/s: True",
                                          "objects: 16"]
    assert "Warning" not in result.stderr, result.stderr
