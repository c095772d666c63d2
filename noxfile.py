"""Every dev task of the lmserde workspace.

    nox -s tests            install core + every plugin, run the whole suite (the README's command)
    nox -s core             core alone, in its own venv
    nox -s "plugin(name)"   core + one plugin (and the in-repo plugins it depends on)
    nox -s lint             ruff + the check that plugins import only the public lmserde API
    nox -s docs             docs link check
    nox -s bench            every benchmark script (ratios against memcpy / baselines)
    nox -s build            wheel + sdist of core and every plugin into dist/, checked, then
                            installed from dist/ into a fresh venv as a user would (tests/packaging)
    nox -s interop          plugins against the real lmcache==0.5.6 package (run by CI)

Venvs are reused: a stamp of the package definitions decides whether anything is reinstalled, and
torch is pinned to 2.13.0 through constraints.txt, so no CUDA build is ever downloaded.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = str(ROOT / "constraints.txt")
PLUGINS = sorted(p.name for p in (ROOT / "plugins").glob("*") if (p / "pyproject.toml").exists())
TEST_EXTRAS = ["pytest>=7", "pytest-timeout>=2.1", "hypothesis>=6", "numpy", "setuptools>=77",
               "prometheus_client>=0.18"]
#: Test-only servers: moto (pure Python) is the S3-compatible server the lmserde-s3 tests and
#: benchmarks/bench_s3.py start on loopback.
SERVER_EXTRAS = ["moto[server]>=5.0.20"]
#: Plugins whose tests start moto (S3; KMS for lmserde-kms).
SERVER_PLUGINS = ("s3", "kms")
#: In-repo plugins a plugin's tests use beyond its dependencies (lmserde-kms's tests encrypt
#: through the aesgcm serde, which is what its key provider serves).
TEST_PLUGINS: dict[str, list[str]] = {"kms": ["aesgcm"]}

#: What lmcache 0.5.6's serde package, serde wrapper, fs adapter and L1 manager import on a
#: CPU-only machine; its own dependency list pulls CUDA packages, so the wheel goes in --no-deps.
LMCACHE_CPU_DEPS = [
    "cryptography", "sortedcontainers", "numpy<=2.2.6", "numba",
    "prometheus_client>=0.18.0,<=0.24.1", "py-cpuinfo", "psutil", "aiohttp", "requests",
    "cachetools", "pyyaml", "aiofiles",
]

#: Triton for the interop session: its interpreter runs LMCache's TurboQuant kernels on the CPU
#: (tests/interop/test_lmcache_turboquant.py). The version pip resolves next to torch 2.13.0 (CPU).
TRITON = "triton==3.9.0"

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _workspace_packages() -> list[Path]:
    """Core and every plugin, each after the in-repo packages it depends on."""
    dirs = _package_dirs()
    packages = [ROOT / "core"]
    for name in PLUGINS:
        for dep in [*_local_dependencies(ROOT / "plugins" / name, dirs), ROOT / "plugins" / name]:
            if dep not in packages:
                packages.append(dep)
    return packages


def _package_dirs() -> dict[str, Path]:
    """Distribution name -> directory, for core and every plugin."""
    dirs = {"lmserde": ROOT / "core"}
    for name in PLUGINS:
        text = (ROOT / "plugins" / name / "pyproject.toml").read_text()
        match = re.search(r'^name\s*=\s*"([^"]+)"', text, re.MULTILINE)
        if match:
            dirs[match.group(1)] = ROOT / "plugins" / name
    return dirs


def _local_dependencies(directory: Path, dirs: dict[str, Path]) -> list[Path]:
    """In-repo distributions a package depends on (recursively), dependencies first."""
    text = (directory / "pyproject.toml").read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.MULTILINE | re.DOTALL)
    names = re.findall(r'"([A-Za-z0-9_.\-]+)', block.group(1)) if block else []
    ordered: list[Path] = []
    for name in names:
        normalized = name.replace("_", "-").lower()
        if normalized in dirs and dirs[normalized] != directory:
            for dep in [*_local_dependencies(dirs[normalized], dirs), dirs[normalized]]:
                if dep not in ordered:
                    ordered.append(dep)
    return ordered


def _stamp(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for base in paths:
        for name in ("pyproject.toml", "setup.py"):
            f = base / name
            if f.exists():
                digest.update(str(f).encode() + f.read_bytes())
    return digest.hexdigest()


def _install(session: nox.Session, packages: list[Path], extras: list[str]) -> None:
    """Install torch (pinned) and ``packages`` editable, unless the venv already has them."""
    stamp_file = Path(session.virtualenv.location) / ".lmserde-stamp"
    stamp = _stamp(packages) + ",".join(extras)
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        session.log("venv up to date; skipping install")
        return
    session.install("-c", CONSTRAINTS, "torch==2.13.0", *extras)
    args: list[str] = []
    for p in packages:
        args += ["-e", str(p)]
    session.install("-c", CONSTRAINTS, *args)
    stamp_file.write_text(stamp)


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Core and every plugin installed together; the whole test suite."""
    packages = _workspace_packages()
    _install(session, packages, [*TEST_EXTRAS, *SERVER_EXTRAS, "rich>=13", "matplotlib>=3.7",
                                 "safetensors>=0.4"])
    session.run("pytest", "-p", "no:cacheprovider", *(session.posargs or ["tests"]))


@nox.session(python="3.11")
def core(session: nox.Session) -> None:
    """Core alone: proves it needs no plugin."""
    _install(session, [ROOT / "core"], TEST_EXTRAS)
    session.run("pytest", "-p", "no:cacheprovider", *(session.posargs or ["tests/core"]))


@nox.session(python="3.11")
@nox.parametrize("name", PLUGINS, ids=PLUGINS)
def plugin(session: nox.Session, name: str) -> None:
    """Core plus one plugin (and the in-repo plugins it depends on), that plugin's tests."""
    directory = ROOT / "plugins" / name
    packages = [ROOT / "core", *_local_dependencies(directory, _package_dirs()),
                *(ROOT / "plugins" / extra for extra in TEST_PLUGINS.get(name, [])), directory]
    _install(session, packages, [*TEST_EXTRAS, *(SERVER_EXTRAS if name in SERVER_PLUGINS else [])])
    session.run("pytest", "-p", "no:cacheprovider", *(session.posargs or [f"tests/plugins/{name}"]))


@nox.session(python="3.11")
def interop(session: nox.Session) -> None:
    """lmserde plugins against the real LMCache 0.5.6: wire formats, registry, LMCache's wrapper,
    and LMCache's TurboQuant Triton kernels run by Triton's interpreter on the CPU."""
    _install(session, _workspace_packages(), [*TEST_EXTRAS, *LMCACHE_CPU_DEPS, TRITON])
    session.install("--no-deps", "lmcache==0.5.6")
    session.run("pytest", "-p", "no:cacheprovider", *(session.posargs or [
        "tests/interop", "tests/plugins/turboquant/test_tq_lmcache_real.py"]))


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff; plugins import only public lmserde names; core's layers (import-linter contracts in
    pyproject.toml: no import cycle, nothing imports from a layer above its own)."""
    session.install("ruff>=0.5", "import-linter>=2.1")
    session.run("ruff", "check", "core", "plugins", "tests", "benchmarks", "tools", "noxfile.py")
    session.run("python", "tools/check_plugin_imports.py")
    # static analysis of core/src (nothing is imported, so the lint venv needs neither torch nor
    # an install of core)
    session.run("lint-imports", "--config", str(ROOT / "pyproject.toml"),
                env={"PYTHONPATH": str(ROOT / "core" / "src")})


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Every relative link in README.md and docs/ points at an existing file."""
    session.run("python", "tools/check_doc_links.py", external=True)


@nox.session(python="3.11")
def build(session: nox.Session) -> None:
    """Wheels and sdists of every distribution into dist/, checked, then installed as a user would.

    tools/dists.py builds each sdist and a wheel from it (core and every plugins/*/pyproject.toml)
    and checks them (twine check --strict, license, URLs, classifiers, Requires-Python, the
    lmserde range, native extensions inside the wheels). tests/packaging then installs
    ``lmserde-fp8`` with ``pip install --find-links dist`` into one fresh venv, lists and uses it,
    and generates, installs and tests a plugin from ``lmserde new-plugin`` in that same venv.
    """
    session.install("build>=1.0", "twine>=6.1", "setuptools>=77", "wheel", "packaging>=22",
                    "pytest>=7", "pytest-timeout>=2.1")
    dist = ROOT / "dist"
    session.run("python", "tools/dists.py", "build", "--outdir", str(dist))
    session.run("python", "tools/dists.py", "check", "--outdir", str(dist))
    session.run("pytest", "-p", "no:cacheprovider", "--confcutdir", "tests/packaging",
                *(session.posargs or ["tests/packaging"]),
                env={"LMSERDE_DIST_DIR": str(dist), "LMSERDE_CONSTRAINTS": CONSTRAINTS})


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Run every benchmark script; each prints ratios against memcpy or a same-run baseline."""
    packages = _workspace_packages()
    _install(session, packages, ["rich>=13", "numpy", *SERVER_EXTRAS])
    scripts = session.posargs or [str(p) for p in sorted((ROOT / "benchmarks").glob("bench_*.py"))]
    for script in scripts:
        session.run("python", script)
