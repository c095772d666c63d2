"""A second process reading through an adapter spec while the test changes a keyring: running
readers must pick the change up without a restart (tests of ``tenant forget`` and key rotation
for the ``aesgcm`` keyring and the frame keyring alike)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from lmserde import MemoryLayoutDesc, ObjectKey

_READER = textwrap.dedent("""
    import json, sys, time
    import torch
    from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
    from lmserde.l1 import L1Manager
    from lmserde.l2 import create_l2_adapter, load_sync
    spec, keys, shapes, expect = (json.loads(arg) for arg in sys.argv[1:5])
    keys = [ObjectKey(bytes.fromhex(h), m, r, g, s) for h, m, r, g, s in keys]
    adapter = create_l2_adapter(spec, L1Manager(64 << 20))
    layout = MemoryLayoutDesc(shapes, [torch.bfloat16] * len(shapes))
    def hits():
        outs = [TensorMemoryObj.allocate(layout) for _ in keys]
        bitmap = load_sync(adapter, keys, outs)
        return [bitmap.test(i) for i in range(len(keys))]
    print(json.dumps(hits()), flush=True)
    sys.stdin.readline()  # the parent changed the keyring
    deadline = time.monotonic() + float(sys.argv[5])
    while hits() != expect and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps([hits(), sorted(adapter.metrics()["rejections"])]), flush=True)
    adapter.close()
""")


def read_across_a_change(spec: dict[str, Any], keys: Sequence[ObjectKey], layout: MemoryLayoutDesc,
                         change: Callable[[], None], expect: list[bool], *,
                         timeout: float = 10.0) -> tuple[list[bool], list[bool], list[str]]:
    """Start a reader process on ``spec`` (a bf16 ``layout``), note its hits on ``keys``, run
    ``change()`` here, then let it load until its hits are ``expect`` or ``timeout`` seconds
    pass: its hits before, its hits after and the reasons it refused objects for."""
    key_rows = [[k.chunk_hash.hex(), k.model_name, k.kv_rank, k.object_group_id, k.cache_salt]
                for k in keys]
    shapes = [list(shape) for shape in layout.shapes]
    child = subprocess.Popen(
        [sys.executable, "-c", _READER, json.dumps(spec), json.dumps(key_rows),
         json.dumps(shapes), json.dumps(expect), str(timeout)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        before = json.loads(child.stdout.readline())
        change()
        child.stdin.write("go\n")
        child.stdin.flush()
        after, reasons = json.loads(child.stdout.readline())
        assert child.wait(timeout=30) == 0
        return before, after, reasons
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
