"""The install hint for a plugin that is not installed: the README's command for where core runs
from (a checkout of this repository, or wheels), always with ``-c constraints.txt``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import lmserde
import pytest
from lmserde import install_hints
from lmserde.install_hints import (
    CLI_COMMANDS,
    KNOWN_PROVIDERS,
    SERDE_GROUP,
    checkout_root,
    install_command,
    install_hint,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text()


def _fake_checkout(root: Path, plugins: tuple[str, ...] = ("fp8",)) -> Path:
    (root / "core" / "src" / "lmserde").mkdir(parents=True)
    (root / "core" / "pyproject.toml").write_text("[project]\nname = 'lmserde'\n")
    (root / "constraints.txt").write_text("torch==2.13.0\n")
    for name in plugins:
        (root / "plugins" / name).mkdir(parents=True)
        (root / "plugins" / name / "pyproject.toml").write_text("[project]\n")
    return root


def _direct_url(path: Path, **info: object) -> str:
    return json.dumps({"url": path.as_uri(), "dir_info": info})


def test_from_the_checkout_root_the_hint_is_the_readmes_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_hints, "checkout_root", lambda: REPO_ROOT)
    monkeypatch.chdir(REPO_ROOT)
    assert install_hint(SERDE_GROUP, "fp8") == ("'fp8' is provided by lmserde-fp8. Install it "
                                                "with: pip install -c constraints.txt ./plugins/fp8")
    # the README installs the same way (core and the plugin's directory, one constraints file)
    assert "pip install -c constraints.txt ./core ./plugins/fp8" in README


def test_elsewhere_the_hint_names_the_checkout_by_absolute_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _fake_checkout(tmp_path / "my checkout", ("asym_k16_v8",))
    monkeypatch.chdir(tmp_path)
    command = install_command("lmserde-asym-k16-v8", root)
    assert shlex.split(command) == ["pip", "install", "-c", str(root / "constraints.txt"),
                                    str(root / "plugins" / "asym_k16_v8")]


def test_without_a_checkout_the_hint_installs_from_wheels_with_the_constraints() -> None:
    command = install_command("lmserde-fp8", None)
    assert command.startswith("pip install -c constraints.txt --find-links DIR lmserde-fp8 "
                              "(DIR: the wheels `nox -s build` writes to dist/")
    # the README's command for wheels, DIR being its dist
    assert "pip install -c constraints.txt --find-links dist lmserde-fp8" in README


def test_a_checkout_without_the_plugins_directory_gets_the_wheels_form(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path, ("fp8",))
    assert "--find-links DIR lmserde-zstd" in install_command("lmserde-zstd", root)


def test_every_provider_of_this_repository_has_its_directory_here() -> None:
    dists = {d for table in KNOWN_PROVIDERS.values() for d in table.values()}
    for dist in sorted(dists):
        command = install_command(dist, REPO_ROOT, cwd=REPO_ROOT)
        directory = REPO_ROOT / shlex.split(command)[-1]
        assert f'name = "{dist}"' in (directory / "pyproject.toml").read_text(), command


def test_the_running_core_finds_this_checkout() -> None:
    if not Path(lmserde.__file__).resolve().is_relative_to(REPO_ROOT) and \
            install_hints._local_dir(_read_direct_url()) != REPO_ROOT / "core":
        pytest.skip("the core under test is not installed from this checkout")
    assert checkout_root() == REPO_ROOT
    assert install_hint(CLI_COMMANDS, "keygen").endswith(
        install_command("lmserde-aesgcm", REPO_ROOT))


def _read_direct_url() -> str | None:
    from importlib import metadata
    try:
        return metadata.distribution("lmserde").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None


def test_where_core_comes_from(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path / "repo with space")
    package = root / "core" / "src" / "lmserde"
    site_package = tmp_path / "venv" / "lib" / "site-packages" / "lmserde"
    site_package.mkdir(parents=True)
    of = install_hints._checkout_of
    assert of(package, None) == root  # editable, or core/src on PYTHONPATH
    assert of(site_package, _direct_url(root / "core")) == root  # pip install ./core
    assert of(site_package, _direct_url(root / "core", editable=True)) == root
    assert of(site_package, None) is None  # from wheels or an index
    assert of(site_package, json.dumps({"url": (tmp_path / "x.whl").as_uri(),
                                        "archive_info": {}})) is None
    assert of(site_package, json.dumps({"url": "https://example.invalid/lmserde",
                                        "dir_info": {}})) is None
    assert of(site_package, "not json") is None
    assert of(site_package, _direct_url(tmp_path / "gone" / "core")) is None  # checkout removed
    (root / "constraints.txt").unlink()  # not this repository's layout
    assert of(package, None) is None
