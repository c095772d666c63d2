"""Issue #27 case 5: what a plugin hands back is checked, and a hook failing at import is listed.

A serde factory that returns something that is not a processor (``None``, a dict, a pair) is a
:class:`~lmserde.PluginLoadError` naming the plugin, its distribution, what it returned and what
was expected — not an ``AttributeError`` the first time the object is used. A pair factory's
serializer and deserializer are checked the same way. ``lmserde plugins`` (without ``--load``)
lists a hook plugin that raises ``SystemExit`` at import as ``failed`` with its error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lmserde import PluginLoadError, create_serde_processor
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter

FACTORIES = """
from lmserde import SerdePair, SerdeSpec
from lmserde.identity import IdentityDeserializer, IdentitySerializer

def none_factory(kwargs):
    return None

def dict_factory(kwargs):
    return {"type": "identity"}

def pair_factory(kwargs):
    # a pair where a processor is expected
    return SerdePair(IdentitySerializer(), IdentityDeserializer())

BAD_PAIR = SerdeSpec(pair_factory=lambda options: SerdePair(IdentitySerializer(), 42))
"""

CASES = [("tp_none", "NoneType None"), ("tp_dict", "dict {'type': 'identity'}"),
         ("tp_pair", "SerdePair SerdePair(serializer=")]


def _install(plugin_site: Callable[..., Path]) -> Path:
    return plugin_site(
        "lmserde-testplugin-results", "2.5",
        entry_points={"lmcache.serde": {
            "tp_none": "lmserde_testplugin_results:none_factory",
            "tp_dict": "lmserde_testplugin_results:dict_factory",
            "tp_pair": "lmserde_testplugin_results:pair_factory",
            "tp_bad_pair": "lmserde_testplugin_results:BAD_PAIR"}},
        modules={"lmserde_testplugin_results": FACTORIES})


@pytest.mark.parametrize(("name", "returned"), CASES)
def test_a_factory_returning_a_non_processor_is_a_plugin_error(
    plugin_site: Callable[..., Path], name: str, returned: str,
) -> None:
    _install(plugin_site)
    with pytest.raises(PluginLoadError) as info:
        create_serde_processor({"type": name})
    message = str(info.value)
    assert f"serde '{name}'" in message and "lmserde-testplugin-results 2.5" in message
    assert f"returned {returned}" in message
    assert "expected an lmserde.SerdeProcessor" in message and "missing: " in message


def test_through_create_l2_adapter_the_adapter_is_closed(
    plugin_site: Callable[..., Path], tmp_path: Path,
) -> None:
    _install(plugin_site)
    with pytest.raises(PluginLoadError, match="serde 'tp_dict'.*returned dict"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv"),
                           "serde": {"type": "tp_dict"}}, L1Manager(1 << 20))
    with pytest.raises(PluginLoadError, match="serde 'tp_none'.*returned NoneType"):
        create_l2_adapter({"type": "memory", "serde": [{"type": "identity"},
                                                       {"type": "tp_none"}]},
                          L1Manager(1 << 20))


def test_a_pair_without_a_deserializer_is_a_plugin_error(
    plugin_site: Callable[..., Path],
) -> None:
    _install(plugin_site)
    with pytest.raises(PluginLoadError) as info:
        create_serde_processor({"type": "tp_bad_pair"})
    message = str(info.value)
    assert "serde 'tp_bad_pair'" in message and "lmserde-testplugin-results 2.5" in message
    assert "deserializer is int 42, which has no deserialize" in message
    assert "expected an lmserde.Deserializer" in message


def test_a_duck_typed_upstream_processor_is_still_accepted() -> None:
    """An object with every processor method (an upstream processor) is not refused."""
    from lmserde import register_serde_factory
    from lmserde.identity import IdentityDeserializer, IdentitySerializer
    from lmserde.processor import AsyncSerdeProcessor
    from lmserde.registry import unregister_serde_factory
    from lmserde.serde_build import PROCESSOR_METHODS

    class Upstream:  # not a SerdeProcessor subclass: every method delegates
        def __init__(self) -> None:
            inner = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer())
            for method in PROCESSOR_METHODS:
                setattr(self, method, getattr(inner, method))

    register_serde_factory("tp_upstream", lambda kwargs: Upstream())
    try:
        proc = create_serde_processor({"type": "tp_upstream"})
        assert isinstance(proc, Upstream)
        proc.close()
    finally:
        unregister_serde_factory("tp_upstream")


def test_cli_plugins_lists_a_hook_exiting_at_import_as_failed(
    plugin_site: Callable[..., Path],
) -> None:
    site = plugin_site("lmserde-testplugin-exithook", "0.7",
                       entry_points={"lmserde.hooks": {"exithook": "lmserde_testplugin_exithook"}},
                       modules={"lmserde_testplugin_exithook": "raise SystemExit(3)\n"})
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    code = "import sys\nfrom lmserde.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    for args in (["plugins", "--json"], ["plugins"]):
        result = subprocess.run([sys.executable, "-c", code, *args], env=env,
                                capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stderr
        if "--json" in args:
            hooks = {h["name"]: h for h in json.loads(result.stdout)["hooks"]}
            assert hooks["exithook"]["status"] == "failed"
            assert hooks["exithook"]["error"] == "SystemExit: 3"
            assert "torch" not in result.stderr
        else:
            assert "exithook (lmserde-testplugin-exithook 0.7): SystemExit: 3" in result.stdout
            row = next(line for line in result.stdout.splitlines()
                       if line.startswith("exithook "))
            assert "failed" in row and "available" not in row
