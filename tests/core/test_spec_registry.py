"""One registry for every entry-point group: same lookup, conflicts, disable switch and hints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lmserde import PluginLoadError, hooks, install_hints
from lmserde.builtin_plugins import BUILTIN_FACTS
from lmserde.cli.main import main
from lmserde.install_hints import L2_ADAPTER_GROUP, SERDE_GROUP
from lmserde.l2 import create_l2_adapter, list_l2_adapters
from lmserde.l2.discovery.registry import get_l2_adapter_spec
from lmserde.plugin_discovery import EntryPointGroup
from lmserde.plugin_registry import SpecRegistry
from lmserde.registries import L2_ADAPTERS, SERDES
from lmserde.registry import get_serde_spec

REPO_ROOT = Path(__file__).resolve().parents[2]

WIDGETS = '''
SPEC = {"widget": "round"}
NOT_A_SPEC = 42
'''

ADAPTER = '''
from lmserde.l2 import MemoryL2Adapter

def factory(options, l1_manager):
    """A test adapter type (memory underneath)."""
    return MemoryL2Adapter()
'''


def _widget_spec(obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        raise TypeError(f"a widget entry point must name a dict, got {type(obj).__name__}")
    return obj


def test_a_later_group_gets_the_same_registry(plugin_site: Callable[..., Path]) -> None:
    group = "lmserde.tests.widgets"
    plugin_site("lmserde-testplugin-widgets", "1.2",
                entry_points={group: {"round": "lmserde_testplugin_widgets:SPEC",
                                      "broken": "lmserde_testplugin_widgets:NOT_A_SPEC"}},
                modules={"lmserde_testplugin_widgets": WIDGETS})
    plugin_site("lmserde-testplugin-widgets-rival", "0.1",
                entry_points={group: {"round": "lmserde_testplugin_widgets:SPEC"}},
                modules={})
    widgets: SpecRegistry[dict[str, str]] = SpecRegistry(group, "widget", _widget_spec, str)
    assert sorted(widgets.names()) == ["broken", "round"]
    with pytest.raises(PluginLoadError, match="'round' in group 'lmserde.tests.widgets' is "
                                              "claimed by several distributions: "
                                              "lmserde-testplugin-widgets"):
        widgets.get("round")
    with pytest.raises(PluginLoadError, match="widget plugin 'broken' from distribution "
                                              "lmserde-testplugin-widgets 1.2 is invalid"):
        widgets.get("broken")
    with pytest.raises(ValueError, match=r"Unknown widget type 'square'\. Registered: broken, "
                                         r"round$"):
        widgets.get("square")
    widgets.register("square", {"widget": "square"})
    assert widgets.get("square") == {"widget": "square"}
    assert widgets.origin("square") == "registered programmatically"
    with pytest.raises(ValueError, match="Widget type already registered: 'square'"):
        widgets.register("square", {})
    entries = {e.name: e for e in widgets.entries()}
    assert entries["round"].status == "conflict"
    assert entries["round"].error.startswith("also claimed by lmserde-testplugin-widgets")
    assert entries["square"].status == "registered"


def test_an_adapter_that_is_not_installed_gets_the_install_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L2_ADAPTERS, "_group", EntryPointGroup("lmserde.tests.empty-group"))
    monkeypatch.setattr(install_hints, "checkout_root", lambda: REPO_ROOT)
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ValueError, match=r"Unknown L2 adapter type 'redis'\. Registered: .*"
                                         r"'redis' is provided by lmserde-redis\. Install it with: "
                                         r"pip install -c constraints\.txt \./plugins/redis$"):
        create_l2_adapter({"type": "redis", "host": "127.0.0.1"})
    monkeypatch.setattr(install_hints, "checkout_root", lambda: None)  # core from wheels
    with pytest.raises(ValueError, match="pip install -c constraints.txt --find-links DIR lmserde-s3"):
        get_l2_adapter_spec("s3")
    with pytest.raises(ValueError) as info:
        get_l2_adapter_spec("nosuchstore")
    assert "pip install" not in str(info.value)  # no hint for names nobody here provides
    assert "Did you mean" not in str(info.value)


def test_a_mistyped_adapter_type_gets_the_closest_name() -> None:
    with pytest.raises(ValueError, match=r"Unknown L2 adapter type 'memroy'\. Registered: .*memory"
                                         r".*\. Did you mean 'memory'\?$"):
        create_l2_adapter({"type": "memroy"})
    with pytest.raises(ValueError, match=r"Did you mean 'fs'\?$"):
        get_l2_adapter_spec("fss")


def test_a_typo_of_a_disabled_plugin_says_it_is_disabled(
        plugin_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMSERDE_DISABLE_PLUGINS", "lmserde-testplugin-store")
    plugin_site("lmserde-testplugin-store", "1.0",
                entry_points={L2_ADAPTER_GROUP: {"widestore": "lmserde_testplugin_store:factory"}},
                modules={"lmserde_testplugin_store": ADAPTER})
    with pytest.raises(ValueError, match=r"Did you mean 'widestore'\? \('widestore' is installed "
                                         r"but disabled by LMSERDE_DISABLE_PLUGINS\)$"):
        get_l2_adapter_spec("widestor")


def test_serdes_and_adapters_word_the_same_problems_the_same_way(
        plugin_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMSERDE_DISABLE_PLUGINS", "lmserde-testplugin-both")
    plugin_site("lmserde-testplugin-both", "3.0",
                entry_points={"lmcache.serde": {"tp_both": "lmserde_testplugin_both:factory"},
                              "lmcache.l2_adapter": {"tp_both": "lmserde_testplugin_both:factory"}},
                modules={"lmserde_testplugin_both": ADAPTER})
    with pytest.raises(ValueError) as serde_error:
        get_serde_spec("tp_both")
    with pytest.raises(ValueError) as adapter_error:
        get_l2_adapter_spec("tp_both")
    suffix = "('tp_both' is installed but disabled by LMSERDE_DISABLE_PLUGINS)"
    assert str(serde_error.value).endswith(suffix) and str(adapter_error.value).endswith(suffix)
    assert str(serde_error.value).startswith("Unknown serde type 'tp_both'. Registered: ")
    assert str(adapter_error.value).startswith("Unknown L2 adapter type 'tp_both'. Registered: ")


def test_adapter_conflicts_are_listed_like_serde_conflicts(
        plugin_site: Callable[..., Path]) -> None:
    for dist in ("lmserde-testplugin-store-a", "lmserde-testplugin-store-b"):
        plugin_site(dist, "1.0",
                    entry_points={"lmcache.l2_adapter": {"tp_store": "lmserde_testplugin_st:factory"}},
                    modules={"lmserde_testplugin_st": ADAPTER})
    info = {i.name: i for i in list_l2_adapters()}["tp_store"]
    assert info.status == "conflict"
    assert info.error in ("also claimed by lmserde-testplugin-store-a 1.0",
                          "also claimed by lmserde-testplugin-store-b 1.0")


def test_core_facts_known_without_importing_match_the_specs() -> None:
    for name, facts in BUILTIN_FACTS[SERDE_GROUP].items():
        spec = SERDES.get(name)
        assert (facts.description, facts.size_contract, facts.lossy) == (
            spec.description, spec.size_contract.value, spec.lossy)
    for name, facts in BUILTIN_FACTS[L2_ADAPTER_GROUP].items():
        assert facts.description == L2_ADAPTERS.get(name).description


def _without_hook_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "_hook_group", EntryPointGroup("lmserde.tests.empty-group"))
    hooks.reset_plugin_manager()


def test_a_plugin_command_that_is_missing_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _without_hook_plugins(monkeypatch)
    monkeypatch.setattr(install_hints, "checkout_root", lambda: REPO_ROOT)
    monkeypatch.chdir(REPO_ROOT)
    try:
        assert main(["keygen", "/tmp/never-written"]) == 2
    finally:
        monkeypatch.undo()
        hooks.reset_plugin_manager()
    err = capsys.readouterr().err
    assert err == ("lmserde: unknown command 'keygen'. 'keygen' is provided by lmserde-aesgcm. "
                   "Install it with: pip install -c constraints.txt ./plugins/aesgcm\n")


def test_a_disabled_plugin_command_says_it_is_disabled(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LMSERDE_DISABLE_PLUGINS", "lmserde-aesgcm")
    hooks.reset_plugin_manager()
    try:
        assert main(["keygen", "/tmp/never-written"]) == 2
    finally:
        monkeypatch.undo()
        hooks.reset_plugin_manager()
    assert "'keygen' is provided by lmserde-aesgcm, which is disabled by LMSERDE_DISABLE_PLUGINS" \
        in capsys.readouterr().err


def test_an_unknown_word_is_still_argparse_business(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
