"""Issue #13, case 2: a plugin raising ``SystemExit`` (or any ``BaseException``) at import, in
its factory or in a hook implementation is reported naming it, and everything else carries on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde import (
    AsyncSerdeProcessor,
    PluginLoadError,
    call_hookimpls,
    create_serde_processor,
    hookimpl,
)
from lmserde.hooks import flush_events, get_plugin_manager, hook_plugin_records
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter
from lmserde.l2.discovery.registry import rescan_l2_adapter_plugins
from lmserde.registry import list_serdes
from lmserde.testing import wait_for_result

EXIT_AT_IMPORT = "raise SystemExit(3)\n"

EXITING_FACTORIES = '''
import asyncio

def exit_factory(kwargs):
    raise SystemExit(4)

def cancelled_factory(kwargs):
    raise asyncio.CancelledError("kms call cancelled")

def generator_exit_factory(kwargs):
    raise GeneratorExit()

def adapter_factory(options, l1_manager):
    raise SystemExit(5)
'''

OBSERVER = '''
from lmserde import hookimpl

EVENTS = []

@hookimpl
def lmserde_serde_task_finished(event):
    EVENTS.append(event.serde_type)
'''


@pytest.fixture(autouse=True)
def adapter_scan() -> Iterator[None]:
    """The ``plugin_site`` fixture rescans serdes and hooks; adapters are rescanned here."""
    yield
    rescan_l2_adapter_plugins()


def _install_exiting(install: Callable[..., Path]) -> Path:
    site = install("lmserde-testplugin-exit", "0.3",
                   entry_points={"lmcache.serde": {"tp_exit": "lmserde_testplugin_exit:SPEC"},
                                 "lmserde.hooks": {"exithook": "lmserde_testplugin_exithook"},
                                 "lmcache.l2_adapter": {"exitadapter":
                                                        "lmserde_testplugin_exitadapter:SPEC"}},
                   modules={"lmserde_testplugin_exit": EXIT_AT_IMPORT,
                            "lmserde_testplugin_exithook": EXIT_AT_IMPORT,
                            "lmserde_testplugin_exitadapter": EXIT_AT_IMPORT})
    install("lmserde-testplugin-factories", "1.1",
            entry_points={"lmcache.serde": {
                "tp_exit_factory": "lmserde_testplugin_factories:exit_factory",
                "tp_cancelled_factory": "lmserde_testplugin_factories:cancelled_factory",
                "tp_genexit_factory": "lmserde_testplugin_factories:generator_exit_factory"},
                "lmcache.l2_adapter": {
                    "tp_exit_adapter": "lmserde_testplugin_factories:adapter_factory"}},
            modules={"lmserde_testplugin_factories": EXITING_FACTORIES})
    rescan_l2_adapter_plugins()
    return site


def test_system_exit_at_import_is_a_plugin_load_error(plugin_site: Callable[..., Path]) -> None:
    _install_exiting(plugin_site)
    for _ in range(2):  # the failure is recorded: asking again reports it again
        with pytest.raises(PluginLoadError) as info:
            create_serde_processor({"type": "tp_exit"})
        message = str(info.value)
        assert "tp_exit" in message and "lmserde-testplugin-exit 0.3" in message
        assert "SystemExit" in message
        assert isinstance(info.value.__cause__, SystemExit)
    infos = {i.name: i for i in list_serdes(load=True)}
    assert infos["tp_exit"].status == "failed" and "SystemExit" in str(infos["tp_exit"].error)
    assert infos["identity"].status in ("loaded", "available")
    create_serde_processor({"type": "identity"}).close()  # the others still work


@pytest.mark.parametrize("serde_type, raised", [
    ("tp_exit_factory", SystemExit),
    ("tp_cancelled_factory", asyncio.CancelledError),
    ("tp_genexit_factory", GeneratorExit),
])
def test_factory_raising_base_exception_is_a_plugin_load_error(
    plugin_site: Callable[..., Path], serde_type: str, raised: type[BaseException],
) -> None:
    _install_exiting(plugin_site)
    with pytest.raises(PluginLoadError) as info:
        create_serde_processor({"type": serde_type})
    message = str(info.value)
    assert serde_type in message and "lmserde-testplugin-factories 1.1" in message
    assert raised.__name__ in message
    assert isinstance(info.value.__cause__, raised)


def test_adapter_raising_system_exit_is_a_plugin_load_error(
    plugin_site: Callable[..., Path],
) -> None:
    _install_exiting(plugin_site)
    with pytest.raises(PluginLoadError, match="tp_exit_adapter.*lmserde-testplugin-factories 1.1"
                                              ".*SystemExit"):
        create_l2_adapter({"type": "tp_exit_adapter"})
    with pytest.raises(PluginLoadError, match="exitadapter.*lmserde-testplugin-exit 0.3"
                                              ".*SystemExit"):
        create_l2_adapter({"type": "exitadapter"}, L1Manager(1 << 20))
    create_l2_adapter({"type": "memory"}).close()


def test_hook_plugin_exiting_at_import_is_isolated(plugin_site: Callable[..., Path]) -> None:
    _install_exiting(plugin_site)
    plugin_site("lmserde-testplugin-observer", "1.2",
                entry_points={"lmserde.hooks": {"observer": "lmserde_testplugin_observer"}},
                modules={"lmserde_testplugin_observer": OBSERVER})
    get_plugin_manager()
    records = {r.name: r for r in hook_plugin_records()}
    assert records["exithook"].status == "failed"
    assert isinstance(records["exithook"].error, SystemExit)
    with AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="obs") as p:
        assert wait_for_result(p, p.submit_serialize([], [], []), serialize=True)
    assert sys.modules["lmserde_testplugin_observer"].EVENTS == ["obs"]


class _Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    @hookimpl
    def lmserde_serde_task_finished(self, event: Any) -> None:
        self.events.append(event.serde_type)


class _Raiser:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    @hookimpl
    def lmserde_serde_task_finished(self, event: Any) -> None:
        raise self.exc


@pytest.mark.parametrize("exc", [SystemExit(2), asyncio.CancelledError(), RuntimeError("x"),
                                 KeyboardInterrupt()])
def test_raising_hook_implementation_does_not_stop_the_others(exc: BaseException) -> None:
    pm = get_plugin_manager()
    first, raiser, last = _Recorder(), _Raiser(exc), _Recorder()
    for plugin in (first, raiser, last):  # the raiser runs between the two recorders
        pm.register(plugin)
    try:
        with AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(),
                                 serde_type="hooked") as p:
            assert wait_for_result(p, p.submit_serialize([], [], []), serialize=True)
            assert wait_for_result(p, p.submit_serialize([], [], []), serialize=True)
        assert flush_events()
        assert first.events == ["hooked", "hooked"] and last.events == ["hooked", "hooked"]
    finally:
        for plugin in (first, raiser, last):
            pm.unregister(plugin)


def test_call_hookimpls_reports_each_result() -> None:
    pm = get_plugin_manager()
    good, bad = _Recorder(), _Raiser(SystemExit(7))
    pm.register(good, name="good-recorder")
    pm.register(bad, name="bad-raiser")
    try:
        results = call_hookimpls("lmserde_serde_task_finished",
                                 event=type("E", (), {"serde_type": "direct"})())
        by_name = {r.plugin_name: r for r in results}
        assert isinstance(by_name["bad-raiser"].error, SystemExit)
        assert by_name["good-recorder"].error is None and good.events == ["direct"]
        assert call_hookimpls("no_such_hook") == []
    finally:
        pm.unregister(good)
        pm.unregister(bad)


# -- the CLI ------------------------------------------------------------------------------------

def _cli(site: Path, *args: str, env_extra: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    code = "import sys\nfrom lmserde.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_cli_plugins_load_reports_a_system_exit_plugin(plugin_site: Callable[..., Path]) -> None:
    site = _install_exiting(plugin_site)
    result = _cli(site, "plugins", "--load", "--json")
    assert result.returncode == 0, (result.returncode, result.stderr)
    data = json.loads(result.stdout)
    serdes = {s["name"]: s for s in data["serdes"]}
    hooks = {h["name"]: h for h in data["hooks"]}
    adapters = {a["name"]: a for a in data["l2_adapters"]}
    assert serdes["tp_exit"]["status"] == "failed" and "SystemExit" in serdes["tp_exit"]["error"]
    assert hooks["exithook"]["status"] == "failed" and "SystemExit" in hooks["exithook"]["error"]
    assert "SystemExit" in adapters["exitadapter"]["error"]
    assert serdes["identity"]["status"] == "loaded"


def test_cli_bench_reports_a_system_exit_plugin_and_carries_on(
    plugin_site: Callable[..., Path],
) -> None:
    site = _install_exiting(plugin_site)
    # Only identity and the broken plugins run (the shipped plugins are disabled to keep it short).
    disabled = ("lmserde-fp8,lmserde-aesgcm,lmserde-turboquant,lmserde-asym-k16-v8,"
                "tp_exit_factory,tp_cancelled_factory,tp_genexit_factory")
    result = _cli(site, "bench", "--json", "--chunks", "1", "--repeat", "1", "--layers", "1",
                  "--tokens", "16", "--queries", "1",
                  env_extra={"LMSERDE_DISABLE_PLUGINS": disabled})
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    report = json.loads(result.stdout)
    text = json.dumps(report)
    assert "tp_exit" in text and "SystemExit" in text
    assert "identity" in text
