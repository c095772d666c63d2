"""Core never needs NumPy (torch does not require it): a framed store/load and a scrub run with
NumPy unimportable, as in a fresh ``pip install lmserde`` venv."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["numpy"] = None  # any import of numpy now fails, as if it were not installed
    import warnings
    warnings.simplefilter("ignore")
    import torch
    from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
    from lmserde.l1 import L1Manager
    from lmserde.l2 import create_l2_adapter, load_sync, scrub_adapter, store_sync

    layout = MemoryLayoutDesc([[64, 2, 8, 128]], [torch.bfloat16])  # 256 KiB: one segment
    big = MemoryLayoutDesc([[2, 4, 256, 1024]], [torch.bfloat16])  # 4 MiB + frame: two segments
    l1 = L1Manager(64 << 20)
    spec = {"type": "fs", "base_path": sys.argv[1], "serde": {"type": "identity"}}
    adapter = create_l2_adapter(spec, l1)
    for i, lay in enumerate((layout, big, big)):
        key = ObjectKey(bytes([i]) * 8, "m", 0)
        src = TensorMemoryObj.allocate(lay)
        src.raw_data.copy_(torch.randint(0, 256, (lay.nbytes,), dtype=torch.uint8))
        assert store_sync(adapter, [key], [src]).is_successful()
        dst = TensorMemoryObj.allocate(lay, zero=True)
        assert load_sync(adapter, [key], [dst]).to_list() == [True]
        assert torch.equal(dst.raw_data, src.raw_data)
    adapter.close()
    wrapper = create_l2_adapter(spec, l1, repair=False)
    report = scrub_adapter(wrapper, decode=True)
    wrapper.close()
    assert report.verdicts == {"ok": 3}, report.verdicts
    assert "numpy" not in {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
    print("ok")
""")


def test_frames_and_scrub_work_without_numpy(tmp_path: Path) -> None:
    script = tmp_path / "no_numpy.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "l2")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
