"""docs/writing-a-plugin.md §8: the hook module shown there installs and every hook fires."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.testing import random_object

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
from doc_examples import doc_example

MODULE = "lmserde_testplugin_xorhooks"


def _install(plugin_site: Callable[..., Path]) -> Path:
    return plugin_site("lmserde-testplugin-xorhooks", "0.1",
                       entry_points={"lmserde.hooks": {"xor": MODULE}},
                       modules={MODULE: doc_example("docs/writing-a-plugin.md", "hooks")})


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (on time) for an event hook that runs on another thread."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "hook was not called"
        time.sleep(0.01)


def test_event_hooks_of_the_doc_example_fire(plugin_site: Callable[..., Path]) -> None:
    _install(plugin_site)
    layout = MemoryLayoutDesc([[4, 64]], [torch.bfloat16])
    keys = [ObjectKey(ObjectKey.IntHash2Bytes(i), "m", 0, 0, "") for i in range(2)]
    l1 = L1Manager(capacity_bytes=16 << 20)
    adapter = create_l2_adapter({"type": "memory", "serde": {"type": "identity"}}, l1)
    try:
        assert store_sync(adapter, keys[:1], [random_object(layout, 0)]).is_successful()
        dsts = [random_object(layout, 9) for _ in keys]
        assert load_sync(adapter, keys, dsts).to_list() == [True, False]
    finally:
        adapter.close()
    hooks = sys.modules[MODULE]
    _eventually(lambda: hooks.BYTES_OUT["identity"] == layout.nbytes)
    _eventually(lambda: hooks.LOADS == {"keys": 2, "hits": 1})


def test_policy_hook_of_the_doc_example_sees_the_auto_policy_choose(
        plugin_site: Callable[..., Path]) -> None:
    from lmserde.adaptive import AutoPolicy, Candidate

    _install(plugin_site)
    policy = AutoPolicy([Candidate("raw", lossy=False), Candidate("small", lossy=False)],
                        name="doc-example")
    for _ in range(2):  # one warm-up turn each; "small" stores half the bytes on a slow link
        i = policy.decide()
        stored = 1000 if i == 0 else 500
        policy.observe_store(i, 1000, stored, 1e-6, stored / 1e6)
    hooks = sys.modules[MODULE]
    _eventually(lambda: hooks.AUTO_CHOICE.get("doc-example") == "small")


def test_cli_hook_of_the_doc_example_adds_its_command(plugin_site: Callable[..., Path]) -> None:
    site = _install(plugin_site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "lmserde.cli.main", "xor-stats", "--mask", "0x33"],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "xor serde, mask 0x33: no state is kept between runs"
