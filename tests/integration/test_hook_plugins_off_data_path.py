"""Hook plugins stay off the data path: loaded once when a processor or wrapper is built, only
their hook modules imported, and a raising implementation never stops the others."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import MemoryLayoutDesc, WrapperTaskEvent, hookimpl
from lmserde.hooks import flush_events, get_plugin_manager
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter

ONE_FP8_TASK = '''
import sys, torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, create_serde_processor
from lmserde.testing import wait_for_result

layout = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])
src = TensorMemoryObj.allocate(layout, zero=True)
proc = create_serde_processor({"type": "fp8"})
assert "lmserde_aesgcm.cli" in sys.modules  # the aesgcm hook module: loaded at construction
before = set(sys.modules)
size = proc.estimate_serialized_size(layout)
dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]), zero=True)
assert wait_for_result(proc, proc.submit_serialize([src], [dst], [ObjectKey(b"k" * 8, "m", 0)]),
                       serialize=True)
proc.close()
heavy = sorted(m for m in sys.modules
               if m.startswith("cryptography") or (m.startswith("lmserde_aesgcm")
                                                    and m not in ("lmserde_aesgcm",
                                                                  "lmserde_aesgcm.cli")))
assert heavy == [], heavy
new = sorted(m for m in set(sys.modules) - before if m.startswith(("lmserde_aesgcm", "lmserde.")))
assert new == [], new  # the task imported no hook plugin and no lmserde module
print("OK")
'''


def test_one_fp8_task_imports_neither_the_aesgcm_serde_nor_cryptography() -> None:
    pytest.importorskip("lmserde_fp8")
    pytest.importorskip("lmserde_aesgcm")
    result = subprocess.run([sys.executable, "-c", ONE_FP8_TASK], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


def test_the_aesgcm_hook_module_imports_only_what_its_hook_needs() -> None:
    pytest.importorskip("lmserde_aesgcm")
    code = ("import sys, lmserde_aesgcm.cli; "
            "bad = sorted(m for m in sys.modules if m.startswith(('cryptography', 'torch', "
            "'lmserde_aesgcm.'))) ; assert bad == ['lmserde_aesgcm.cli'], bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


KV = MemoryLayoutDesc([[16, 2, 32]], [torch.float16])


class _Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    @hookimpl
    def lmserde_wrapper_task_finished(self, event: WrapperTaskEvent) -> None:
        self.events.append(event.operation)


class _Raiser:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    @hookimpl
    def lmserde_wrapper_task_finished(self, event: Any) -> None:
        raise self.exc


@pytest.fixture
def hooks() -> Iterator[tuple[_Recorder, _Recorder]]:
    pm = get_plugin_manager()
    first, last = _Recorder(), _Recorder()
    plugins = (first, _Raiser(RuntimeError("observer bug")), _Raiser(SystemExit(3)), last)
    for plugin in plugins:  # the raisers run between the two recorders
        pm.register(plugin)
    yield first, last
    for plugin in plugins:
        pm.unregister(plugin)


def test_raising_wrapper_hooks_do_not_stop_the_others_or_the_data_path(
    tmp_path: Path, l1: L1Manager, cache: Cache, hooks: tuple[_Recorder, _Recorder],
) -> None:
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_int8"}}, l1)
    try:
        keys = [key_of(i) for i in range(3)]
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        bitmap, _ = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, True, True]
    finally:
        wrapper.close()
    assert flush_events()
    first, last = hooks
    assert first.events == ["store", "load"] and last.events == ["store", "load"]
