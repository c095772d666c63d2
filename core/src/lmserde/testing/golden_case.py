"""Golden-object cases: what one golden object pins, and how its manifest records it.

A :class:`GoldenCase` names a serde config (one serde dict, or a chain as a list of dicts), the
layout of the object stored, the seed of its source data, the key it is stored under and the
test-only secret files its config needs. :func:`lmserde.testing.write_golden_objects` stores it
once through the real data path; :func:`lmserde.testing.check_golden_objects` loads it in every
later release. The manifest of a case (``<name>.json``) holds :meth:`GoldenCase.definition` — the
JSON of everything above, key files by SHA-256 — so a case whose definition was edited after its
objects were written is caught, not silently checked against other bytes.

Secret files: a config refers to a key file as ``"$GOLDEN_KEYS/<file>"`` (:data:`KEY_DIR`);
the kit substitutes a private directory holding ``0600`` copies of the case's key files (a git
checkout does not keep file modes, and ``aesgcm`` refuses key files others may read).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc

__all__ = [
    "DEFAULT_GOLDEN_KEY",
    "GOLDEN_MANIFEST_FORMAT",
    "KEY_DIR",
    "GoldenCase",
    "GoldenObjectError",
    "key_from_json",
    "key_to_json",
    "layout_from_json",
    "layout_to_json",
    "sha256_hex",
    "substitute_key_dir",
]

#: Version of the manifest format written by this kit (``"lmserde_golden_object"`` field).
GOLDEN_MANIFEST_FORMAT = 1
#: Prefix of a config string naming one of the case's key files: ``"$GOLDEN_KEYS/master.key"``.
KEY_DIR = "$GOLDEN_KEYS"
#: The key a case is stored under unless it names another (object group 0: split tiers need it).
DEFAULT_GOLDEN_KEY = ObjectKey(ObjectKey.IntHash2Bytes(0x601DE7_0B1EC7_01), "golden/llama-like",
                               0x01000100, 0, "")

_CASE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")
_KEY_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class GoldenObjectError(AssertionError):
    """A golden object that today's code does not read back bit-exactly, or a golden directory
    that is not what was written (a changed, missing or regenerated file, an edited case)."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def layout_to_json(layout: MemoryLayoutDesc) -> dict[str, Any]:
    """``{"shapes": [[...], ...], "dtypes": ["bfloat16", ...]}``."""
    return {"shapes": [[int(d) for d in shape] for shape in layout.shapes],
            "dtypes": [str(dtype).removeprefix("torch.") for dtype in layout.dtypes]}


def layout_from_json(data: Mapping[str, Any]) -> MemoryLayoutDesc:
    """The layout :func:`layout_to_json` wrote; ``ValueError`` for an unknown dtype name."""
    dtypes = []
    for name in data["dtypes"]:
        dtype = getattr(torch, str(name), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown torch dtype {name!r} in a golden manifest")
        dtypes.append(dtype)
    return MemoryLayoutDesc([list(shape) for shape in data["shapes"]], dtypes)


def key_to_json(key: ObjectKey) -> dict[str, Any]:
    return {"chunk_hash": key.chunk_hash.hex(), "model_name": key.model_name,
            "kv_rank": key.kv_rank, "object_group_id": key.object_group_id,
            "cache_salt": key.cache_salt}


def key_from_json(data: Mapping[str, Any]) -> ObjectKey:
    return ObjectKey(bytes.fromhex(data["chunk_hash"]), data["model_name"], int(data["kv_rank"]),
                     int(data["object_group_id"]), data["cache_salt"])


def _key_file_refs(value: Any) -> list[str]:
    """Every key file a config names through :data:`KEY_DIR` (nested dicts and lists too)."""
    if isinstance(value, str):
        return [value[len(KEY_DIR) + 1:]] if value.startswith(KEY_DIR + "/") else []
    if isinstance(value, Mapping):
        return [ref for v in value.values() for ref in _key_file_refs(v)]
    if isinstance(value, (list, tuple)):
        return [ref for v in value for ref in _key_file_refs(v)]
    return []


def substitute_key_dir(value: Any, key_dir: Path) -> Any:
    """``value`` with every ``"$GOLDEN_KEYS/<file>"`` string replaced by ``key_dir / <file>``."""
    if isinstance(value, str):
        if value.startswith(KEY_DIR + "/"):
            return str(key_dir / value[len(KEY_DIR) + 1:])
        return value
    if isinstance(value, Mapping):
        return {k: substitute_key_dir(v, key_dir) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute_key_dir(v, key_dir) for v in value]
    return value


@dataclass(frozen=True)
class GoldenCase:
    """One golden object to write once and read in every later release.

    ``name``: lowercase letters, digits, ``_ . -`` (it names the case's files; never reuse one
    for other content). ``serde``: the ``serde`` value of an adapter spec (a dict, or a list of
    dicts for a chain); pin every option that changes the bytes written (e.g. ``aesgcm``'s
    ``frame_version``), so that a later change of a default does not change what the case means.
    ``layout``/``seed``: the stored object is :func:`lmserde.testing.random_object` of them (the
    source is not kept: the decoded reference is). ``key_files``: file name -> bytes of test-only
    secrets the config names as ``"$GOLDEN_KEYS/<file>"``. ``frame``: the adapter spec's
    ``serde_frame`` (``False``: the serde's bytes alone, as LMCache stores them).
    ``adapter_options``: further keys of the adapter spec that change the stored bytes (a frame
    key: ``{"frame_key_path": "$GOLDEN_KEYS/<file>"}``); recorded only when given, so the
    definitions of cases without them are unchanged.
    """

    name: str
    serde: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    layout: MemoryLayoutDesc
    seed: int = 0
    key: ObjectKey = DEFAULT_GOLDEN_KEY
    key_files: Mapping[str, bytes] = field(default_factory=dict)
    frame: bool = True
    description: str = ""
    adapter_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _CASE_NAME.match(self.name):
            raise ValueError(f"golden case name {self.name!r}: use 1-100 characters of a-z, 0-9, "
                             "'_', '.', '-', starting with a letter or digit")
        if not isinstance(self.layout, MemoryLayoutDesc):
            raise TypeError(f"golden case {self.name!r}: layout must be a MemoryLayoutDesc")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"golden case {self.name!r}: seed must be an int >= 0")
        if not isinstance(self.frame, bool):
            raise ValueError(f"golden case {self.name!r}: frame must be True or False")
        try:
            json.dumps(self.serde, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"golden case {self.name!r}: serde config must be JSON ({exc})") from None
        for file_name, content in self.key_files.items():
            if not _KEY_FILE_NAME.match(file_name):
                raise ValueError(f"golden case {self.name!r}: key file name {file_name!r} must be "
                                 "a plain file name (letters, digits, '_', '.', '-')")
            if not isinstance(content, bytes):
                raise TypeError(f"golden case {self.name!r}: key file {file_name!r} must be bytes")
        try:
            json.dumps(dict(self.adapter_options), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"golden case {self.name!r}: adapter options must be JSON "
                             f"({exc})") from None
        refs = _key_file_refs(self.serde) + _key_file_refs(dict(self.adapter_options))
        missing = sorted(set(refs) - set(self.key_files))
        if missing:
            raise ValueError(f"golden case {self.name!r}: its config names key file(s) {missing} "
                             f"that are not in key_files ({sorted(self.key_files)})")

    def definition(self) -> dict[str, Any]:
        """What the manifest records of this case (JSON; key files by SHA-256)."""
        definition = {
            "serde": self.serde,
            "frame": self.frame,
            "layout": layout_to_json(self.layout),
            "seed": self.seed,
            "key": key_to_json(self.key),
            "key_files": {n: sha256_hex(c) for n, c in sorted(self.key_files.items())},
        }
        if self.adapter_options:
            definition["adapter_options"] = dict(self.adapter_options)
        return json.loads(json.dumps(definition))
