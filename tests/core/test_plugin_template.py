"""``lmserde new-plugin NAME``: the generated package installs and passes its own tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from lmserde.cli.main import main
from lmserde.compat import API_VERSION, core_requirement
from lmserde.plugin_template import core_dependency_range, create_plugin, plugin_names
from packaging.version import Version


def test_names_derived_from_the_serde_type() -> None:
    names = plugin_names("zstd_fast")
    assert names["distribution"] == "lmserde-zstd-fast"
    assert names["package"] == "lmserde_zstd_fast"
    assert names["spec"] == "ZSTD_FAST_SPEC" and names["title"] == "ZstdFast"


@pytest.mark.parametrize("bad", ["", "Upper", "9lives", "with-dash", "x" * 41, "a b"])
def test_invalid_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid serde name"):
        plugin_names(bad)


def test_core_range_is_this_cores_api_series() -> None:
    assert core_dependency_range("0.1.0") == ">=0.1,<0.2"
    assert core_dependency_range("1.4.2") == ">=1.4,<2"
    req = core_requirement([f"lmserde{core_dependency_range()}"])
    assert req is not None and req.specifier.contains(Version(API_VERSION))


def test_cli_writes_the_package_and_refuses_an_occupied_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "p"
    assert main(["new-plugin", "crcdemo", "--directory", str(target)]) == 0
    assert "created lmserde-crcdemo" in capsys.readouterr().out
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == "lmserde-crcdemo"
    assert project["entry-points"]["lmcache.serde"] == {"crcdemo": "lmserde_crcdemo.serde:CRCDEMO_SPEC"}
    assert f"lmserde{core_dependency_range()}" in project["dependencies"]
    assert "pytest>=7" in project["optional-dependencies"]["test"]
    for rel in ("README.md", "src/lmserde_crcdemo/serde.py", "src/lmserde_crcdemo/py.typed",
                "tests/test_crcdemo.py", "tests/write_golden.py", "tests/test_golden.py"):
        assert (target / rel).is_file(), rel
    assert main(["new-plugin", "crcdemo", "--directory", str(target)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert main(["new-plugin", "Bad-Name", "--directory", str(tmp_path / "q")]) == 2
    assert not (tmp_path / "q").exists()


def test_readme_installs_core_from_a_checkout_with_the_torch_constraints(tmp_path: Path) -> None:
    """lmserde is not on PyPI: the README's one shell block gets it from a checkout's dist/, pins
    torch with that checkout's constraints.txt and links no PyPI page (``nox -s build`` runs the
    block verbatim: tests/packaging)."""
    create_plugin("crcdemo", tmp_path / "p")
    readme = (tmp_path / "p" / "README.md").read_text()
    assert "pypi.org" not in readme and "](https://github.com/lmserde/lmserde)" in readme
    blocks = re.findall(r"^```sh\n(.*?)\n```$", readme, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1
    assert ('pip install -c "$LMSERDE_CHECKOUT/constraints.txt" --find-links '
            '"$LMSERDE_CHECKOUT/dist" -e ".[test]"') in blocks[0]
    assert blocks[0].startswith(': "${LMSERDE_CHECKOUT:?')
    unset = subprocess.run(["bash", "-c", blocks[0].splitlines()[0]], capture_output=True,
                           text=True, env={"PATH": os.environ.get("PATH", "")}, check=False)
    assert unset.returncode != 0 and "set LMSERDE_CHECKOUT to an lmserde checkout" in unset.stderr


def test_generated_plugin_installs_and_passes_its_conformance_tests(tmp_path: Path) -> None:
    source = tmp_path / "lmserde-crcdemo"
    create_plugin("crcdemo", source)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(site), str(source)],
                   check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    listed = subprocess.run([sys.executable, "-m", "lmserde.cli.main", "plugins"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert "crcdemo" in listed.stdout and "lmserde-crcdemo" in listed.stdout, listed.stderr
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(source / "tests")], cwd=source, env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
    assert "1 skipped" in result.stdout  # the golden test, until the objects are written

    def golden_test() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-rs", str(source / "tests" / "test_golden.py")], cwd=source,
                              env=env, capture_output=True, text=True, timeout=300, check=False)

    # the README's step: write the golden objects once; then the check runs and passes
    written = subprocess.run([sys.executable, str(source / "tests" / "write_golden.py")],
                             cwd=source, env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    assert written.returncode == 0, written.stdout + written.stderr
    assert "3 new golden case(s)" in written.stdout
    objects = sorted((source / "tests" / "golden").glob("*.object"))
    assert [p.name for p in objects] == ["crcdemo-bf16-unframed.object", "crcdemo-bf16.object",
                                         "crcdemo-fp16.object"]
    passed = golden_test()
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr
    # a golden object that no longer matches fails the plugin's own tests
    data = bytearray(objects[1].read_bytes())
    data[-1] ^= 0x01
    objects[1].write_bytes(bytes(data))
    failed = golden_test()
    assert failed.returncode == 1 and "crcdemo-bf16: object" in failed.stdout, failed.stdout
