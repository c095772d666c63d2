"""The s3 guide's local recipe (``plugins/s3/examples/try_locally.py``) runs as the guide says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "plugins" / "s3" / "examples" / "try_locally.py"
GUIDE = REPO / "docs" / "plugins" / "s3.md"
#: moto's start in a child process plus torch's import take seconds on a loaded 2-core machine.
TIMEOUT_S = 180


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # what a developer's shell might hold: the script must not use any of it
    env.update(AWS_PROFILE="someone-elses-profile", AWS_ENDPOINT_URL="http://127.0.0.1:9",
               AWS_ACCESS_KEY_ID="AKIA-REAL-LOOKING", AWS_SECRET_ACCESS_KEY="not-throwaway")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env, cwd=REPO, check=False)


def test_the_recipe_stores_and_loads_one_chunk_and_stops_its_server() -> None:
    result = _run()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("moto S3 server on http://127.0.0.1:")
    endpoint = lines[0].split()[4].rstrip(",")
    assert json.loads(lines[1].removeprefix("adapter spec: ")) == {
        "type": "s3", "bucket": "kv-cache", "endpoint_url": endpoint}
    assert lines[2:] == ["stored 65536 bytes for a 65536-byte chunk; objects in the bucket: 1",
                         "loaded it back: bit-exact", "server stopped"]
    # the server is gone: nothing answers on its port any more
    with pytest.raises(OSError):
        urllib.request.urlopen(endpoint + "/", timeout=2)


def test_the_recipe_with_a_serde() -> None:
    pytest.importorskip("lmserde_fp8", reason="the variant uses the fp8 plugin")
    result = _run("--serde", '{"type": "fp8"}')
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stored 32832 bytes for a 65536-byte chunk" in result.stdout  # half + the frame
    assert "loaded it back: relative error" in result.stdout


def test_the_guide_shows_the_recipe() -> None:
    guide = GUIDE.read_text()
    assert "python plugins/s3/examples/try_locally.py" in guide
    assert 'pip install -c constraints.txt ./core "./plugins/s3[test]"' in guide
