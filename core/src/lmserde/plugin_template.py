"""The serde plugin template behind ``lmserde new-plugin NAME``.

:func:`create_plugin` writes a ready-to-install distribution ``lmserde-NAME``: a ``pyproject.toml``
declaring the ``lmcache.serde`` entry point and the range of cores it is built for, a serde module
with declared options, a test module running the public conformance kit, a golden-object test
(:func:`lmserde.testing.check_golden_objects` on ``tests/golden/``, written once with
``python tests/write_golden.py``; skipped until then) and a README. The serde it starts with is
complete and lossless (a byte copy followed by a CRC-32 trailer that loads verify), so the
generated package installs and passes its tests before its author changes a line.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from packaging.version import Version

from lmserde.compat import API_VERSION

__all__ = ["HOMEPAGE", "NAME_PATTERN", "core_dependency_range", "create_plugin", "plugin_names"]

#: Where the generated README points for lmserde (its repository: lmserde is not on PyPI).
HOMEPAGE = "https://github.com/lmserde/lmserde"

#: A serde type name: what users write as ``"type"`` in configs (also the module suffix).
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def core_dependency_range(api_version: str = API_VERSION) -> str:
    """The ``lmserde`` range a new plugin declares: this core's API series (``>=0.1,<0.2``)."""
    v = Version(api_version)
    if v.major == 0:
        return f">={v.major}.{v.minor},<{v.major}.{v.minor + 1}"
    return f">={v.major}.{v.minor},<{v.major + 1}"


def plugin_names(name: str) -> dict[str, str]:
    """Every name derived from the serde type ``name``; ``ValueError`` for an invalid one."""
    if not NAME_PATTERN.match(name):
        raise ValueError(
            f"invalid serde name {name!r}: use 1-40 lowercase letters, digits and '_', "
            "starting with a letter (it becomes the config 'type' and a Python module name)")
    return {
        "name": name,
        "distribution": "lmserde-" + name.replace("_", "-"),
        "package": f"lmserde_{name}",
        "spec": f"{name.upper()}_SPEC",
        "title": "".join(part.capitalize() for part in name.split("_")),
        "core_range": core_dependency_range(),
        "homepage": HOMEPAGE,
    }


def create_plugin(name: str, directory: Path) -> list[Path]:
    """Write the plugin ``name`` into ``directory`` (created; must not exist or be empty).

    Returns the files written. Raises ``ValueError`` for a bad name or a non-empty directory.
    """
    values = plugin_names(name)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"{directory} already exists and is not an empty directory")
    written: list[Path] = []
    for relative, text in _FILES.items():
        path = directory / Template(relative).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values))
        written.append(path)
    return written


_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "$distribution"
version = "0.1.0"
description = "$name: a KV-cache serde for lmserde / LMCache L2 tiers"
readme = "README.md"
requires-python = ">=3.10"
license = "Apache-2.0"
# The range of lmserde cores this plugin is built for: lmserde refuses (and `lmserde plugins`
# lists as incompatible) a plugin whose range excludes the installed core.
dependencies = ["lmserde$core_range", "torch>=2.4"]

[project.optional-dependencies]
test = ["pytest>=7", "hypothesis>=6"]

# The entry-point name is the "type" users write in configs.
[project.entry-points."lmcache.serde"]
$name = "$package.serde:$spec"

[tool.setuptools.packages.find]
where = ["src"]

[tool.setuptools.package-data]
$package = ["py.typed"]
'''

_INIT = '''\
"""$distribution: the ``$name`` serde (entry point ``$package.serde:$spec``)."""

from $package.serde import $spec, ${title}Deserializer, ${title}Serializer

__all__ = ["$spec", "${title}Deserializer", "${title}Serializer"]
'''

_SERDE = '''\
"""The ``$name`` serde: each object's bytes followed by a CRC-32 trailer checked on load.

Replace the bodies of ``serialize``/``deserialize`` (and the estimate) with your transform; keep
the contracts: ``serialize`` returns the bytes written and never writes past the estimate,
``deserialize`` takes the length from ``dst`` (the source may be longer than what was written)
and raises on anything it cannot decode (the host turns that into a miss for that key).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from lmserde import (
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    SerdeOption,
    SerdePair,
    SerdeSizeContract,
    SerdeSpec,
    Serializer,
    as_byte_tensor,
    processor_options,
)

__all__ = ["$spec", "${title}Serializer", "${title}Deserializer"]

TRAILER_BYTES = 4


def _crc32(obj: MemoryObj, length: int) -> int:
    """CRC-32 of the first ``length`` logical bytes of ``obj`` (read in place, no copy)."""
    if length == 0:
        return zlib.crc32(b"")
    return zlib.crc32(memoryview(obj.byte_array).cast("B")[:length])


def _trailer(crc: int) -> torch.Tensor:
    return torch.tensor(list(crc.to_bytes(TRAILER_BYTES, "little")), dtype=torch.uint8)


def _check_room(role: str, have: int, need: int) -> None:
    if have < need:
        raise ValueError(f"$name: {role} holds {have} bytes, need {need}")


class ${title}Serializer(Serializer):
    """Copies the object and appends the CRC-32 of its bytes."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        out = as_byte_tensor(dst)
        n = data.numel()
        _check_room("destination", out.numel(), n + TRAILER_BYTES)
        out[:n].copy_(data)
        out[n : n + TRAILER_BYTES].copy_(_trailer(_crc32(src, n)))
        return n + TRAILER_BYTES

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes + TRAILER_BYTES


class ${title}Deserializer(Deserializer):
    """Restores the bytes; with ``verify`` a wrong checksum is an error (a miss, never garbage)."""

    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        data = as_byte_tensor(src)
        n = out.numel()
        _check_room("source", data.numel(), n + TRAILER_BYTES)
        if self.verify:
            stored = int.from_bytes(bytes(data[n : n + TRAILER_BYTES].tolist()), "little")
            if stored != _crc32(src, n):
                raise ValueError(f"$name: checksum mismatch for {key!r}: the object is corrupt")
        out.copy_(data[:n])


def _pair(kwargs: dict[str, Any]) -> SerdePair:
    # kwargs holds every declared option, validated, defaults filled in; core runs the pair on
    # max_workers threads, alone or as one stage of a chain
    return SerdePair(${title}Serializer(), ${title}Deserializer(kwargs["verify"]))


$spec = SerdeSpec(
    pair_factory=_pair,
    description="Byte copy with a CRC-32 trailer verified on load",
    options=(
        SerdeOption("verify", bool, True, "check the CRC-32 trailer on load"),
        *processor_options(max_workers=1),
    ),
    size_contract=SerdeSizeContract.EXACT,
    lossy=False,
)
'''

_TESTS = '''\
"""The public conformance kit against the installed ``$name`` entry point, plus its own checks."""

from __future__ import annotations

import pytest
import torch
from lmserde import (
    MemoryLayoutDesc,
    ObjectKey,
    SerdeConfig,
    TensorMemoryObj,
    create_serde_processor,
)
from lmserde.testing import SerdeConformance, random_object, wait_for_result


class Test${title}Conformance(SerdeConformance):
    serde_type = "$name"
    serde_kwargs = {"verify": True}
    detects_corruption = True  # the CRC-32 trailer rejects garbage


def test_unknown_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match="verfy.*verify"):
        create_serde_processor(SerdeConfig("$name", {"verfy": False}))


def test_a_flipped_byte_fails_the_load() -> None:
    layout = MemoryLayoutDesc([[8, 16]], [torch.float16])
    proc = create_serde_processor(SerdeConfig("$name"))
    try:
        src = random_object(layout, 1)
        temp = TensorMemoryObj.allocate(MemoryLayoutDesc([[layout.nbytes + 4]], [torch.uint8]))
        key = ObjectKey(b"chunk-hash", "model", 0, 0, "tenant")
        task = proc.submit_serialize([src], [temp], [key])
        assert wait_for_result(proc, task, serialize=True)
        temp.raw_data[5] ^= 0x01
        out = TensorMemoryObj.allocate(layout)
        task = proc.submit_deserialize([temp], [out], [key])
        assert not wait_for_result(proc, task, serialize=False)
    finally:
        proc.close()
'''

_WRITE_GOLDEN = '''\
"""The golden objects of the ``$name`` serde: stored once, read back by every later release.

Run ``python tests/write_golden.py`` once, when this format is first released, and commit
``tests/golden/``; ``tests/test_golden.py`` then loads every object in each test run and requires
the bytes it decoded then. The script adds the cases that are missing and never replaces a file.
To change the format on purpose, give the spec a new ``format_version``, keep reading the old
bytes, and add cases here under new names: never edit or regenerate a case (your users' stored
objects were written by the old code; the golden objects stand for them).
"""

from __future__ import annotations

from pathlib import Path

import torch
from lmserde import MemoryLayoutDesc
from lmserde.testing import GoldenCase, write_golden_objects

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"

#: A small Llama-like KV chunk: [K/V, layers, tokens, kv_heads * head_dim] (2 x 2 x 16 x 2*128).
KV_BF16 = MemoryLayoutDesc([[2, 2, 16, 256]], [torch.bfloat16])
KV_FP16 = MemoryLayoutDesc([[2, 2, 16, 256]], [torch.float16])

#: One case per option value that changes the bytes written, and per dtype the serde reads. Pin
#: every such option in the config, so that a later change of a default does not change a case.
CASES = [
    GoldenCase("$name-bf16", {"type": "$name", "verify": True}, KV_BF16, seed=1),
    GoldenCase("$name-fp16", {"type": "$name", "verify": True}, KV_FP16, seed=2),
    GoldenCase("$name-bf16-unframed", {"type": "$name", "verify": True}, KV_BF16, seed=1,
               frame=False, description="the serde's bytes alone (serde_frame: false)"),
]

if __name__ == "__main__":
    written = write_golden_objects(GOLDEN_DIR, CASES)
    print(f"{len(written)} new golden case(s) in {GOLDEN_DIR}: {', '.join(written) or '-'}")
'''

_TEST_GOLDEN = '''\
"""Format stability: the golden objects in tests/golden/ still load bit-exactly with this code."""

from __future__ import annotations

import pytest
from lmserde.testing import check_golden_objects
from write_golden import CASES, GOLDEN_DIR


def test_golden_objects_load_bit_exactly() -> None:
    if not GOLDEN_DIR.is_dir():
        pytest.skip("no golden objects yet: run `python tests/write_golden.py` once, when the "
                    "format is first released, and commit tests/golden/")
    check_golden_objects(GOLDEN_DIR, CASES)
'''

_README = '''\
# $distribution

The `$name` serde for [lmserde]($homepage) L2 tiers, made with
`lmserde new-plugin $name`. It starts as a lossless byte copy with a CRC-32 trailer that loads
verify; replace the transform in `src/$package/serde.py` with yours.

## Install and test

lmserde is not on PyPI: pip takes it from the wheels an lmserde checkout builds into its `dist/`
folder (`python3 -m nox -s build` there), and that checkout's `constraints.txt` pins torch to the
CPU build it is tested with (without it pip may download a multi-GB CUDA build). Set
`LMSERDE_CHECKOUT` to the checkout, then, in this directory (lmserde's CI runs this block
verbatim):

```sh
: "$${LMSERDE_CHECKOUT:?set LMSERDE_CHECKOUT to an lmserde checkout whose dist/ holds its wheels}"
python -m venv .venv && . .venv/bin/activate
pip install -c "$$LMSERDE_CHECKOUT/constraints.txt" --find-links "$$LMSERDE_CHECKOUT/dist" -e ".[test]"
lmserde plugins              # lists $name
pytest                       # runs lmserde's conformance kit on the installed entry point
```

In an environment that already has lmserde, `pip install .` installs the plugin (or build a
wheel with `python -m build`). Then name it in an L2 adapter's config:

```json
{"type": "fs", "base_path": "/var/cache/kv", "serde": {"type": "$name", "verify": true}}
```

Options: `verify` (bool, default `true`): check the trailer on load; `max_workers` (int, default 1).

The entry point (`[project.entry-points."lmcache.serde"]` in `pyproject.toml`) names the config
type; the dependency range on `lmserde` names the cores this plugin is built for.

## Golden objects: what users stored stays readable

Your users' L2 tiers hold objects your released code wrote; a refactor that changes one byte of
the format turns all of them into misses. Pin it once, when the format is first released:

```
python tests/write_golden.py      # stores each case of CASES through lmserde's real data path
git add tests/golden              # the objects, their decoded references, a manifest per case
```

From then on `tests/test_golden.py` (skipped until `tests/golden/` exists) loads every object with
the code under test and requires the decoded bytes bit-exactly, and the manifests' SHA-256s catch a
regenerated file. Never regenerate or edit a case to make it pass: to change the format on
purpose, bump the spec's `format_version`, keep reading the old bytes, and add new cases (new
names) to `tests/write_golden.py`; the script adds only missing cases and never replaces a file.
See lmserde's docs/compatibility.md.
'''

_FILES: dict[str, str] = {
    "pyproject.toml": _PYPROJECT,
    "README.md": _README,
    "src/$package/__init__.py": _INIT,
    "src/$package/py.typed": "",
    "src/$package/serde.py": _SERDE,
    "tests/test_$name.py": _TESTS,
    "tests/write_golden.py": _WRITE_GOLDEN,
    "tests/test_golden.py": _TEST_GOLDEN,
}
