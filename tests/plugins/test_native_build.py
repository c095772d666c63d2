"""The shared native build of lmserde (its checksum kernel), lmserde-fp8, lmserde-turboquant and
lmserde-zstd: one helper, the same flags, and no silent fallback (a warning, or an error with
``LMSERDE_REQUIRE_NATIVE=1``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CANONICAL = ROOT / "tools" / "lmserde_native_build.py"
PLUGINS = {  # distribution directory name -> (distribution, extension module)
    "core": ("lmserde", "lmserde._checksum_copy"),
    "fp8": ("lmserde-fp8", "lmserde_fp8._fastcodec"),
    "turboquant": ("lmserde-turboquant", "lmserde_turboquant._native"),
    "zstd": ("lmserde-zstd", "lmserde_zstd._planes"),
}


def _directory(name: str) -> Path:
    return ROOT / "core" if name == "core" else ROOT / "plugins" / name


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"native_build_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_each_distribution_links_the_one_helper(plugin: str) -> None:
    """One source: each distribution's ``lmserde_native_build.py`` is a symbolic link to the file
    in tools/ (its sdist carries it as a regular file: ``tools/dists.py check``)."""
    link = _directory(plugin) / "lmserde_native_build.py"
    assert link.is_symlink(), f"{link} must be a link to {CANONICAL}, not a copy"
    assert link.resolve() == CANONICAL.resolve()
    manifest = (_directory(plugin) / "MANIFEST.in").read_text().split("\n")
    assert "include lmserde_native_build.py" in manifest  # the sdist builds on its own
    setup_py = (_directory(plugin) / "setup.py").read_text()
    assert "from lmserde_native_build import native_setup_kwargs" in setup_py
    assert "extra_compile_args" not in setup_py and "build_ext" not in setup_py


def test_the_sdist_carries_the_helper_as_a_regular_file(tmp_path: Path) -> None:
    """setuptools follows the link when it writes the sdist, so an unpacked sdist builds alone."""
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "tools", work / "tools")
    shutil.copytree(_directory("fp8"), work / "plugins" / "fp8", symlinks=True,
                    ignore=shutil.ignore_patterns("*.so", "*.egg-info", "build"))
    assert (work / "plugins" / "fp8" / "lmserde_native_build.py").is_symlink()
    result = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir",
                             str(tmp_path / "dist")], cwd=work / "plugins" / "fp8",
                            # an sdist compiles nothing: skip the extension, and do not let a
                            # CI's LMSERDE_REQUIRE_NATIVE turn that skip into an error
                            env={**{k: v for k, v in os.environ.items()
                                    if k != "LMSERDE_REQUIRE_NATIVE"},
                                 "LMSERDE_FP8_NO_EXTENSION": "1"},
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    sdist = next((tmp_path / "dist").glob("*.tar.gz"))
    with tarfile.open(sdist) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/lmserde_native_build.py"))
        assert member.isfile() and not member.issym()
        data = tf.extractfile(member)
        assert data is not None and data.read() == CANONICAL.read_bytes()


def test_the_flags_keep_ieee_rounding() -> None:
    flags = _load(CANONICAL).COMPILE_ARGS
    assert "-fno-fast-math" in flags and "-ffp-contract=off" in flags
    assert not any(f.startswith(("-march", "-ffast-math", "-Ofast")) for f in flags)


FAKE_CC = """#!/bin/sh
# records the compiler command line, then fails like a broken toolchain
echo "$@" >> "{log}"
exit 1
"""


def _build(plugin: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str],
                                                             list[str]]:
    """Run the plugin's ``setup.py build_ext`` in a copy, with a compiler that always fails."""
    src = _directory(plugin)
    work = tmp_path / plugin
    shutil.copytree(src, work, ignore=shutil.ignore_patterns("*.so", "*.egg-info", "build"))
    log = tmp_path / f"{plugin}-cc.log"
    cc = tmp_path / "fake-cc"
    cc.write_text(FAKE_CC.format(log=log))
    cc.chmod(0o755)
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("LMSERDE_REQUIRE_NATIVE", "LMSERDE_CORE_NO_EXTENSION",
                             "LMSERDE_FP8_NO_EXTENSION", "LMSERDE_TURBOQUANT_NO_EXTENSION",
                             "LMSERDE_ZSTD_NO_EXTENSION")}
    full_env.update(CC=str(cc), LDSHARED=f"{cc} -shared", **env)
    result = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "tmp")],
        cwd=work, env=full_env, capture_output=True, text=True, timeout=300, check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def _flags(command_line: str) -> list[str]:
    """The optimisation/standard/float/visibility flags of one compiler call, in order."""
    return [a for a in command_line.split()
            if a.startswith(("-O", "-std", "-ffp", "-fno-fast", "-fvisibility")) and a != "-O"]


def test_both_plugins_compile_with_the_same_flags_and_warn_when_not_built(
    tmp_path: Path,
) -> None:
    compile_args = list(_load(CANONICAL).COMPILE_ARGS)
    seen = {}
    for plugin, (dist, module) in PLUGINS.items():
        result, calls = _build(plugin, tmp_path / "warn")
        assert result.returncode == 0, result.stderr  # the install goes on without the codec
        assert f"WARNING: {dist}: the native extension {module} was NOT built" in result.stderr
        assert "LMSERDE_REQUIRE_NATIVE=1" in result.stderr
        assert len(calls) == 1
        flags = _flags(calls[0])
        assert flags[-len(compile_args):] == compile_args, calls[0]  # ours come last and win
        seen[plugin] = flags[-len(compile_args):]
    assert seen["core"] == seen["fp8"] == seen["turboquant"] == seen["zstd"]


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_require_native_turns_the_warning_into_an_error(plugin: str, tmp_path: Path) -> None:
    dist, module = PLUGINS[plugin]
    result, _ = _build(plugin, tmp_path, LMSERDE_REQUIRE_NATIVE="1")
    assert result.returncode != 0
    assert f"{dist}: the native extension {module} was NOT built" in result.stderr
    assert "NativeBuildError" in result.stderr


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_skipping_the_extension_warns_and_conflicts_with_require(plugin: str,
                                                                 tmp_path: Path) -> None:
    skip = f"LMSERDE_{plugin.upper()}_NO_EXTENSION"
    result, calls = _build(plugin, tmp_path / "skip", **{skip: "1"})
    assert result.returncode == 0 and calls == []
    assert f"skipped: {skip} is set" in result.stderr
    result, calls = _build(plugin, tmp_path / "both", **{skip: "1", "LMSERDE_REQUIRE_NATIVE": "1"})
    assert result.returncode != 0 and calls == []
    assert "NativeBuildError" in result.stderr


def test_native_codecs_are_built_when_required() -> None:
    """With ``LMSERDE_REQUIRE_NATIVE=1`` (set by ``.ci/run``) a plugin installed without its
    extension fails here instead of its native tests being skipped."""
    if os.environ.get("LMSERDE_REQUIRE_NATIVE", "").strip().lower() not in ("1", "true", "yes",
                                                                          "on"):
        pytest.skip("LMSERDE_REQUIRE_NATIVE is not set")
    from lmserde import checksum_kernel, get_serde_spec

    assert checksum_kernel() is not None, "lmserde._checksum_copy was not built"
    for serde in ("fp8", "turboquant", "zstd"):
        status = get_serde_spec(serde).describe_native()
        assert status is not None and status.get("built") is True, f"{serde}: {status}"
