"""Build and check the wheel and sdist of every distribution in this repository.

    python tools/dists.py build [--outdir dist]   sdist, then a wheel built from that sdist, for
                                                  core and every plugins/*/pyproject.toml
    python tools/dists.py check [--outdir dist]   twine check --strict, plus the metadata rules below

Building the wheel from the sdist (``python -m build`` does this) proves the sdist is complete: a
native plugin's sdist must carry its C sources and compile them. The build runs without isolation
(``--no-isolation``) in the calling environment, which needs ``build``, ``setuptools>=77`` and
``wheel``; ``nox -s build`` provides them.

Metadata rules, for every distribution found: name, version, summary, ``Requires-Python``, a
license and its text (``LICENSE``, in the wheel and the sdist), at least one ``Project-URL`` and
``Classifier``; a plugin's ``lmserde`` requirement has a lower and an upper bound (the core API
range of :mod:`lmserde.compat`); a distribution with a ``setup.py`` declaring ``ext_modules``
ships its compiled extension inside a platform wheel and its C sources and the build helper
(``lmserde_native_build.py``, a regular file: in the repository a link into ``tools/``) inside
the sdist; a pure
distribution has a ``py3-none-any`` wheel.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The one native build helper (``tools/``), linked beside each native distribution's setup.py.
NATIVE_BUILD_HELPER = "lmserde_native_build.py"


@dataclass(frozen=True)
class Source:
    """One distribution's source tree."""

    name: str
    directory: Path

    @property
    def native(self) -> bool:
        """Whether its setup.py compiles C sources (directly or through the shared build helper)."""
        setup = self.directory / "setup.py"
        if not setup.exists():
            return False
        text = setup.read_text()
        return "Extension(" in text or "native_setup_kwargs(" in text

    @property
    def file_stem(self) -> str:
        """The name as it appears in wheel and sdist file names."""
        return re.sub(r"[-_.]+", "_", self.name).lower()


def sources() -> list[Source]:
    """Core, then every ``plugins/*/pyproject.toml`` in name order (new plugins are found)."""
    found = []
    for directory in [ROOT / "core", *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))]:
        text = (directory / "pyproject.toml").read_text()
        match = re.search(r'^name\s*=\s*"([^"]+)"', text, re.MULTILINE)
        if match is None:
            raise SystemExit(f"{directory}/pyproject.toml has no [project] name")
        found.append(Source(match.group(1), directory))
    return found


def build(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    for src in sources():
        for old in [*outdir.glob(f"{src.file_stem}-*.whl"), *outdir.glob(f"{src.file_stem}-*.tar.gz")]:
            old.unlink()
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
                        "--outdir", str(outdir), str(src.directory)],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"built {src.name} in {time.monotonic() - start:.1f} s")


def _one(outdir: Path, pattern: str) -> Path:
    matches = sorted(outdir.glob(pattern))
    if len(matches) != 1:
        raise ValueError(f"expected one {pattern} in {outdir}, found {[m.name for m in matches]}")
    return matches[0]


def wheel_metadata(wheel: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(METADATA fields -> values, member names) of a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(zf.read(meta_name).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields, names


def problems_of(src: Source, outdir: Path) -> list[str]:
    """Every broken metadata rule for ``src``'s built files (empty when all hold)."""
    out: list[str] = []
    try:
        wheel = _one(outdir, f"{src.file_stem}-*.whl")
        sdist = _one(outdir, f"{src.file_stem}-*.tar.gz")
    except ValueError as exc:
        return [str(exc)]
    fields, members = wheel_metadata(wheel)
    for field in ("Name", "Version", "Summary", "Requires-Python", "Project-URL", "Classifier"):
        if not fields.get(field):
            out.append(f"{wheel.name}: no {field}")
    if not (fields.get("License") or fields.get("License-Expression")):
        out.append(f"{wheel.name}: no License / License-Expression")
    if not any(m.endswith(".dist-info/licenses/LICENSE") for m in members):
        out.append(f"{wheel.name}: the license text (LICENSE) is not in the wheel")
    with tarfile.open(sdist) as tf:
        if not any(n.endswith("/LICENSE") and n.count("/") == 1 for n in tf.getnames()):
            out.append(f"{sdist.name}: the license text (LICENSE) is not in the sdist")
    if src.name != "lmserde":
        core = [r for r in fields.get("Requires-Dist", []) if re.match(r"lmserde\s*[<>=!~(]", r)]
        if not core:
            out.append(f"{wheel.name}: no Requires-Dist on lmserde")
        elif not ("<" in core[0] and ">" in core[0]):
            out.append(f"{wheel.name}: lmserde requirement {core[0]!r} needs a lower and an upper bound")
    extensions = [m for m in members if m.endswith((".so", ".pyd"))]
    if src.native:
        if not extensions:
            out.append(f"{wheel.name}: native distribution but no compiled extension in the wheel")
        if wheel.name.endswith("-none-any.whl"):
            out.append(f"{wheel.name}: native distribution with a pure-Python wheel tag")
        with tarfile.open(sdist) as tf:
            if not any(n.endswith(".c") for n in tf.getnames()):
                out.append(f"{sdist.name}: native distribution without C sources")
            out += _helper_problems(sdist.name, tf)
    elif extensions or not wheel.name.endswith("py3-none-any.whl"):
        out.append(f"{wheel.name}: pure distribution but a platform wheel {extensions}")
    return out


def _helper_problems(sdist_name: str, tf: tarfile.TarFile) -> list[str]:
    """The shared build helper must be in the sdist as a regular file: in the repository it is a
    symbolic link to ``tools/lmserde_native_build.py``, which an unpacked sdist could not reach."""
    helper = [m for m in tf.getmembers()
              if m.name.endswith(f"/{NATIVE_BUILD_HELPER}") and m.name.count("/") == 1]
    if not helper:
        return [f"{sdist_name}: native distribution without {NATIVE_BUILD_HELPER}"]
    if not helper[0].isfile():
        return [f"{sdist_name}: {NATIVE_BUILD_HELPER} is not a regular file in the sdist"]
    return []


def check(outdir: Path) -> int:
    files = sorted([*outdir.glob("*.whl"), *outdir.glob("*.tar.gz")])
    subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
                   check=True)
    problems = [p for src in sources() for p in problems_of(src, outdir)]
    for p in problems:
        print(f"metadata: {p}", file=sys.stderr)
    print(f"checked {len(files)} files of {len(sources())} distributions: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "check"))
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.outdir)
        return 0
    return check(args.outdir)


if __name__ == "__main__":
    sys.exit(main())
