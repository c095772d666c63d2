"""Plugin discovery against real installed distributions written into a temp site directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lmserde import PluginLoadError, create_serde_processor, get_registered_serde_types
from lmserde.registry import list_serdes

GOOD = '''
from typing import Any
from lmserde import AsyncSerdeProcessor, SerdeOption, SerdeSizeContract, SerdeSpec, max_workers_option
from lmserde.identity import IdentityDeserializer, IdentitySerializer

IMPORTED = True

def _create(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), kwargs["max_workers"],
                               serde_type="tp_good")

SPEC = SerdeSpec(factory=_create, description="test plugin that copies",
                 options=(SerdeOption("level", int, 1, "level"), max_workers_option()),
                 size_contract=SerdeSizeContract.EXACT)

def plain_factory(kwargs):
    """Upstream-style plain factory."""
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer())
'''

BROKEN_IMPORT = "raise ImportError('missing native library libfoo.so')\n"

RAISING_FACTORY = '''
def factory(kwargs):
    raise RuntimeError("factory exploded")
'''


def _install_good(install: Callable[..., Path]) -> Path:
    return install("lmserde-testplugin-good", "2.3.4",
                   entry_points={"lmcache.serde": {"tp_good": "lmserde_testplugin_good:SPEC",
                                                   "tp_plain": "lmserde_testplugin_good:plain_factory"}},
                   modules={"lmserde_testplugin_good": GOOD}, summary="Good test plugin")


def test_good_plugin_is_discovered_lazily_and_builds(plugin_site: Callable[..., Path]) -> None:
    _install_good(plugin_site)
    assert "tp_good" in get_registered_serde_types()
    assert "lmserde_testplugin_good" not in sys.modules  # scanning imports nothing
    proc = create_serde_processor({"type": "tp_good", "level": 3, "max_workers": 2})
    proc.close()
    assert "lmserde_testplugin_good" in sys.modules
    with pytest.raises(ValueError, match="Unknown option 'levle'.*Did you mean 'level'"):
        create_serde_processor({"type": "tp_good", "levle": 3})
    plain = create_serde_processor({"type": "tp_plain", "anything": "goes"})
    plain.close()


def test_broken_plugins_are_isolated(plugin_site: Callable[..., Path]) -> None:
    _install_good(plugin_site)
    plugin_site("lmserde-testplugin-broken", "0.0.1",
                entry_points={"lmcache.serde": {"tp_broken": "lmserde_testplugin_broken:SPEC"}},
                modules={"lmserde_testplugin_broken": BROKEN_IMPORT})
    plugin_site("lmserde-testplugin-raising", "0.9",
                entry_points={"lmcache.serde": {"tp_raising": "lmserde_testplugin_raising:factory"}},
                modules={"lmserde_testplugin_raising": RAISING_FACTORY})
    with pytest.raises(PluginLoadError) as info:
        create_serde_processor({"type": "tp_broken"})
    message = str(info.value)
    assert "tp_broken" in message and "lmserde-testplugin-broken 0.0.1" in message
    assert "libfoo.so" in message and isinstance(info.value.__cause__, ImportError)

    with pytest.raises(PluginLoadError, match="tp_raising.*lmserde-testplugin-raising 0.9.*"
                                              "factory exploded") as info2:
        create_serde_processor({"type": "tp_raising"})
    assert isinstance(info2.value.__cause__, RuntimeError)

    # the host and the other plugins keep working; the listing reports the failure
    create_serde_processor({"type": "tp_good"}).close()
    create_serde_processor({"type": "identity"}).close()
    infos = {i.name: i for i in list_serdes(load=True)}
    assert infos["tp_broken"].status == "failed" and "libfoo.so" in (infos["tp_broken"].error or "")
    assert infos["tp_good"].status == "loaded" and infos["tp_good"].error is None
    assert infos["tp_good"].description == "test plugin that copies"


def test_same_distribution_seen_twice_is_not_a_conflict(
    plugin_site: Callable[..., Path], tmp_path: Path
) -> None:
    _install_good(plugin_site)
    _install_good(lambda *a, **k: plugin_site(*a, site=tmp_path / "site2", **k))
    infos = {i.name: i for i in list_serdes()}
    assert infos["tp_good"].status == "available"
    create_serde_processor({"type": "tp_good"}).close()


def test_two_distributions_claiming_one_name_is_an_error_naming_both(
    plugin_site: Callable[..., Path],
) -> None:
    _install_good(plugin_site)
    plugin_site("acme-serde-copy", "5.0",
                entry_points={"lmcache.serde": {"tp_good": "lmserde_testplugin_acme:SPEC"}},
                modules={"lmserde_testplugin_acme": GOOD})
    with pytest.raises(PluginLoadError) as info:
        create_serde_processor({"type": "tp_good"})
    assert "lmserde-testplugin-good" in str(info.value) and "acme-serde-copy" in str(info.value)
    assert {i.name: i for i in list_serdes()}["tp_good"].status == "conflict"


def test_disable_env_skips_named_plugins(
    plugin_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSERDE_DISABLE_PLUGINS", "tp_good, other")
    _install_good(plugin_site)
    assert "tp_good" not in get_registered_serde_types()
    assert "tp_plain" in get_registered_serde_types()
    with pytest.raises(ValueError, match="disabled by LMSERDE_DISABLE_PLUGINS"):
        create_serde_processor({"type": "tp_good"})


def _cli(site: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    code = ("import sys\nfrom lmserde.cli.main import main\nrc = main(sys.argv[1:])\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED')\n"
            "sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_cli_listing_is_metadata_only_and_survives_broken_plugins(
    plugin_site: Callable[..., Path],
) -> None:
    site = _install_good(plugin_site)
    plugin_site("lmserde-testplugin-broken", "0.0.1",
                entry_points={"lmcache.serde": {"tp_broken": "lmserde_testplugin_broken:SPEC"}},
                modules={"lmserde_testplugin_broken": BROKEN_IMPORT})
    result = _cli(site, "plugins")
    assert result.returncode == 0, result.stderr
    assert "TORCH_NOT_IMPORTED" in result.stdout
    for text in ("identity", "tp_good", "lmserde-testplugin-good", "2.3.4", "tp_broken"):
        assert text in result.stdout

    loaded = _cli(site, "plugins", "--load", "--json")
    assert loaded.returncode == 0, loaded.stderr
    data = json.loads(loaded.stdout[: loaded.stdout.rindex("}") + 1])
    serdes = {s["name"]: s for s in data["serdes"]}
    assert serdes["tp_broken"]["status"] == "failed"
    assert "libfoo.so" in serdes["tp_broken"]["error"]
    assert serdes["tp_good"]["status"] == "loaded"
    assert serdes["identity"]["distribution"] == "lmserde"


def test_cli_info_shows_options_and_contract(plugin_site: Callable[..., Path]) -> None:
    site = _install_good(plugin_site)
    result = _cli(site, "info", "tp_good", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert data["size_contract"] == "exact" and data["lossy"] is False
    assert [o["name"] for o in data["options"]] == ["level", "max_workers"]
    assert data["distribution"] == "lmserde-testplugin-good" and data["version"] == "2.3.4"
    unknown = _cli(site, "info", "does_not_exist")
    assert unknown.returncode == 2 and "Unknown serde type" in unknown.stderr


def test_plugin_built_and_installed_by_pip_is_discovered(
    tmp_path: Path, plugin_site: Callable[..., Path]
) -> None:
    """A source tree with a pyproject entry point, built and installed by pip (offline)."""
    src = tmp_path / "acme-src"
    (src / "lmserde_testplugin_pip").mkdir(parents=True)
    (src / "lmserde_testplugin_pip" / "__init__.py").write_text(GOOD)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "lmserde-testplugin-pip"\nversion = "0.4.2"\n'
        'description = "built by pip in a test"\n'
        '[project.entry-points."lmcache.serde"]\ntp_pip = "lmserde_testplugin_pip:SPEC"\n'
        '[tool.setuptools]\npackages = ["lmserde_testplugin_pip"]\n'
    )
    target = tmp_path / "pip-site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(target), str(src)],
        check=True, capture_output=True, timeout=300,
    )
    # register the pip-installed site like any other test site (path + rescans + cleanup)
    plugin_site("lmserde-testplugin-unused", "0", entry_points={}, modules={}, site=target)
    info = {i.name: i for i in list_serdes()}["tp_pip"]
    assert (info.distribution, info.version) == ("lmserde-testplugin-pip", "0.4.2")
    assert info.description == "built by pip in a test"
    create_serde_processor({"type": "tp_pip", "level": 2}).close()
