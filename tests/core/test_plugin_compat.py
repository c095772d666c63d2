"""Plugins declare the core they are built for (Requires-Dist: lmserde ...); others are refused."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import lmserde
import pytest
from lmserde import PluginLoadError, create_serde_processor, get_registered_serde_types
from lmserde.cli.main import main
from lmserde.compat import API_VERSION, core_requirement, incompatibility
from lmserde.registry import list_serdes

PLUGIN = '''
from lmserde import AsyncSerdeProcessor, SerdeSpec
from lmserde.identity import IdentityDeserializer, IdentitySerializer

SPEC = SerdeSpec(factory=lambda kw: AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer()),
                 description="compat test plugin")
'''

ADAPTER = "raise ImportError('must never be imported')\n"


def _install(plugin_site: Callable[..., Path], name: str, requires: tuple[str, ...]) -> None:
    module = f"lmserde_testplugin_{name}"
    plugin_site(f"lmserde-testplugin-{name}", "1.0", requires=requires, summary=f"{name} plugin",
                entry_points={"lmcache.serde": {f"tp_{name}": f"{module}:SPEC"},
                              "lmcache.l2_adapter": {f"tp_{name}_store": f"{module}_l2:SPEC"}},
                modules={module: PLUGIN, f"{module}_l2": ADAPTER})


def test_api_version_is_the_core_release() -> None:
    assert lmserde.API_VERSION == API_VERSION == lmserde.__version__


def test_core_requirement_ignores_other_packages_extras_and_bad_lines() -> None:
    assert core_requirement(None) is None
    assert core_requirement(["torch>=2.4", "lmserde-fp8<1", "not a requirement ((("]) is None
    assert core_requirement(['lmserde<0.0.1; extra == "test"']) is None
    req = core_requirement(["torch", "LMSerde >=0.1, <0.2", 'lmserde<0; extra == "dev"'])
    assert req is not None and str(req.specifier) == "<0.2,>=0.1"


def test_plugin_for_another_core_is_listed_incompatible_and_refused(
        plugin_site: Callable[..., Path]) -> None:
    _install(plugin_site, "future", ("torch>=2.4", "lmserde>=9.0,<10"))
    assert "tp_future" in get_registered_serde_types()
    info = {i.name: i for i in list_serdes()}["tp_future"]
    assert info.status == "incompatible"
    assert "lmserde<10,>=9.0" in info.error and API_VERSION in info.error
    with pytest.raises(PluginLoadError, match=r"tp_future.*built for lmserde<10,>=9.0 but this core "
                                              rf"is lmserde {API_VERSION}"):
        create_serde_processor({"type": "tp_future"})
    assert "lmserde_testplugin_future" not in sys.modules  # refused without importing it


def test_compatible_unbounded_and_extra_only_requirements_are_accepted(
        plugin_site: Callable[..., Path]) -> None:
    _install(plugin_site, "ok", (f"lmserde>={API_VERSION},<99",))
    _install(plugin_site, "any", ())
    _install(plugin_site, "extra", ('lmserde<0.0.1; extra == "legacy"',))
    infos = {i.name: i for i in list_serdes()}
    for name in ("tp_ok", "tp_any", "tp_extra"):
        assert infos[name].status == "available" and infos[name].error is None
        create_serde_processor({"type": name}).close()


def test_cli_lists_incompatible_plugins_without_importing_them(
        plugin_site: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    _install(plugin_site, "old", ("lmserde<0.0.1",))
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "tp_old" in out and "incompatible" in out
    assert f"built for lmserde<0.0.1 but this core is lmserde {API_VERSION}" in out  # Problems
    assert main(["plugins", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    serde = {s["name"]: s for s in data["serdes"]}["tp_old"]
    adapter = {a["name"]: a for a in data["l2_adapters"]}["tp_old_store"]
    for row in (serde, adapter):
        assert row["status"] == "incompatible" and "lmserde<0.0.1" in row["error"]
    assert "lmserde_testplugin_old" not in sys.modules


def test_incompatibility_of_a_distribution_without_metadata_is_none() -> None:
    assert incompatibility(None) is None
