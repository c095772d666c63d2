"""Which serdes a bench run measures: ``--serde`` arguments, defaults, and per-run completion.

A ``--serde`` argument is a type name (``fp8``), a JSON object (``{"type": "fp8", ...}``) or a JSON
list of objects (a chain, applied in order on store). Types and options are validated against the
installed plugins before anything runs; bad input raises :class:`BenchInputError`.

Without ``--serde`` every installed serde runs with options that make sense for a benchmark:
``turboquant`` runs several presets, ``aesgcm`` gets a throwaway key (see :func:`complete_config`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmserde.registry import get_serde_spec, list_serdes

__all__ = [
    "BenchInputError",
    "BenchSerde",
    "load_json_arg",
    "RunContext",
    "SerdeConfigValue",
    "parse_serde_arg",
    "validate_serde_config",
    "default_serdes",
    "complete_config",
    "TURBOQUANT_PRESETS",
    "BENCH_VARIANTS",
    "BENCH_CHAINS",
]

SerdeConfigValue = dict[str, Any] | list[dict[str, Any]]

#: TurboQuant presets the default run measures (those the installed plugin offers).
TURBOQUANT_PRESETS = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_3bit_nc", "tq3")

#: Option sets the default run measures for these types (each one the installed plugin accepts):
#: TurboQuant's presets from its fp8-key one to the 3-bit one.
BENCH_VARIANTS: dict[str, tuple[dict[str, Any], ...]] = {
    "turboquant": tuple({"preset": p} for p in TURBOQUANT_PRESETS),
}

#: Chains the default run measures after the single serdes, each one when every stage's type is
#: installed and loads: quantize, then compress the fp8 codes losslessly.
BENCH_CHAINS: tuple[tuple[dict[str, Any], ...], ...] = (
    ({"type": "fp8"}, {"type": "zstd"}),
)

#: Serde types the default run leaves out, with the reason shown to the user.
_NOT_BY_DEFAULT: dict[str, str] = {}

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class BenchInputError(ValueError):
    """Bad input to ``lmserde bench`` (an unknown serde type, invalid JSON, an unknown option...)."""


def load_json_arg(flag: str, text: str, example: str) -> Any:
    """The JSON value of the command-line argument ``text`` given to ``flag``;
    :class:`BenchInputError` naming the flag, the error's column and ``example`` (a valid value)
    if it is not valid JSON."""
    try:
        return json.loads(text.strip())
    except json.JSONDecodeError as exc:
        raise BenchInputError(
            f"{flag} {text!r} is not valid JSON ({exc.msg} at column {exc.colno}); expected "
            f"e.g. {example!r}"
        ) from None


@dataclass(frozen=True)
class BenchSerde:
    """One serde configuration to measure: ``config`` is a serde dict or a chain (list)."""

    label: str
    config: SerdeConfigValue
    default: bool = False


@dataclass
class RunContext:
    """What :func:`complete_config` needs to know about the run."""

    workdir: Path
    head_dim: int
    workers: int
    reduced_layers: bool
    notes: list[str] = field(default_factory=list)


def parse_serde_arg(text: str) -> SerdeConfigValue:
    """A ``--serde`` argument as a serde dict or chain; :class:`BenchInputError` if malformed."""
    stripped = text.strip()
    if not stripped:
        raise BenchInputError("--serde needs a serde type (e.g. fp8) or a JSON object")
    if stripped[0] in "{[":
        value = load_json_arg("--serde", text, '{"type": "fp8"}')
    elif _NAME_RE.match(stripped):
        value = {"type": stripped}
    else:
        raise BenchInputError(
            f"--serde {text!r} is neither a serde type name nor a JSON object "
            '(e.g. fp8 or \'{"type": "fp8", "fp8_dtype": "float8_e5m2"}\')'
        )
    stages = value if isinstance(value, list) else [value]
    if not stages:
        raise BenchInputError("--serde chain (JSON list) must name at least one serde")
    for stage in stages:
        if not isinstance(stage, dict):
            raise BenchInputError(
                f"--serde {text!r}: each serde must be a JSON object, got {type(stage).__name__}"
            )
        if not isinstance(stage.get("type"), str) or not stage["type"]:
            raise BenchInputError(f"--serde {text!r}: a serde object needs a 'type' field")
    return [dict(s) for s in stages] if isinstance(value, list) else dict(value)


def _stages(config: SerdeConfigValue) -> list[dict[str, Any]]:
    return list(config) if isinstance(config, list) else [config]


def validate_serde_config(config: SerdeConfigValue) -> None:
    """Check every stage's type and options against the installed plugins.

    Raises :class:`BenchInputError` (with the registry's message: the known types, or the
    accepted options) for an unknown type, an unknown option or an invalid value, and for a
    chain whose stages do not compose.
    """
    for stage in _stages(config):
        serde_type = stage["type"]
        try:
            spec = get_serde_spec(serde_type)
            spec.validate(serde_type, {k: v for k, v in stage.items() if k != "type"})
        except ValueError as exc:
            raise BenchInputError(str(exc)) from None
    if isinstance(config, list) and len(config) > 1:
        from lmserde.serde_chain import check_chain_configs

        try:
            check_chain_configs(config)
        except ValueError as exc:
            raise BenchInputError(str(exc)) from None


def _format_value(value: Any) -> str:
    text = str(value)
    return text.removeprefix("turboquant_").removeprefix("float8_")


def label_for(config: SerdeConfigValue) -> str:
    """A short, readable name: the type, plus its options in parentheses; chains joined by ``+``."""
    parts = []
    for stage in _stages(config):
        options = [(k, v) for k, v in stage.items() if k != "type"]
        if not options:
            parts.append(stage["type"])
        elif len(options) == 1 and options[0][0] in ("preset", "scaling"):
            parts.append(f"{stage['type']}:{_format_value(options[0][1])}")
        else:
            inner = ",".join(f"{k}={_format_value(v)}" for k, v in options)
            parts.append(f"{stage['type']}({inner})")
    return "+".join(parts)


def unique_labels(serdes: Sequence[BenchSerde]) -> list[BenchSerde]:
    """The same list with repeated labels made distinct (``fp8``, ``fp8#2``)."""
    seen: dict[str, int] = {}
    out = []
    for s in serdes:
        n = seen.get(s.label, 0) + 1
        seen[s.label] = n
        out.append(s if n == 1 else BenchSerde(f"{s.label}#{n}", s.config, s.default))
    return out


def _valid_variants(serde_type: str, variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The option sets of ``variants`` that the installed ``serde_type`` accepts."""
    try:
        spec = get_serde_spec(serde_type)
    except ValueError:
        return []
    valid = []
    for options in variants:
        try:
            spec.validate(serde_type, options)
        except ValueError:
            continue
        valid.append(dict(options))
    return valid


def default_serdes() -> tuple[list[BenchSerde], list[str]]:
    """Every installed serde with benchmark options, and notes on the ones left out.

    Types in :data:`BENCH_VARIANTS` run once per variant the installed version accepts (and with
    defaults when it accepts none); every other type runs with its defaults. Then each chain of
    :data:`BENCH_CHAINS` whose stage types all run.
    """
    serdes: list[BenchSerde] = []
    notes: list[str] = []
    infos = sorted(list_serdes(), key=lambda i: i.name != "identity")  # the baseline first
    for info in infos:
        if info.error or info.status not in ("available", "registered", "loaded"):
            reason = info.error or info.status
            notes.append(f"{info.name}: not run ({reason})")
            continue
        if info.name in _NOT_BY_DEFAULT:
            notes.append(f"{info.name}: not run by default: {_NOT_BY_DEFAULT[info.name]}")
            continue
        variants = _valid_variants(info.name, BENCH_VARIANTS.get(info.name, ())) or [{}]
        for options in variants:
            config = {"type": info.name, **options}
            serdes.append(BenchSerde(label_for(config), config, default=True))
    running = {s.config["type"] for s in serdes if isinstance(s.config, dict)}
    for chain in BENCH_CHAINS:
        if all(stage["type"] in running for stage in chain):
            stages = [dict(stage) for stage in chain]
            serdes.append(BenchSerde(label_for(stages), stages, default=True))
    return serdes, notes


def _declared(serde_type: str) -> dict[str, Any]:
    try:
        spec = get_serde_spec(serde_type)
    except ValueError:
        return {}
    return {o.name: o for o in spec.options or ()}


def _throwaway_key(workdir: Path) -> str:
    path = workdir / "bench-throwaway.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32))
        finally:
            os.close(fd)
    return str(path)


def complete_config(config: SerdeConfigValue, ctx: RunContext) -> SerdeConfigValue:
    """Fill in what a benchmark needs and the user did not set, by declared option names.

    * ``max_workers``: the run's ``--workers`` (every serde gets the same parallelism);
    * ``head_dim``: the chunk's head dimension;
    * an ``hkdf`` ``master_key_path``: a throwaway random key in the run's temporary directory;
    * ``skip_first_layers`` / ``skip_last_layers``: 0 when the chunk holds only some of the model's
      layers (the boundary layers a serde keeps raw would otherwise be most of the sample).
    Notes for the output are appended to ``ctx.notes``.
    """
    completed = []
    for stage in _stages(config):
        stage = dict(stage)
        declared = _declared(stage["type"])
        if "max_workers" in declared and "max_workers" not in stage:
            stage["max_workers"] = ctx.workers
        if "head_dim" in declared and "head_dim" not in stage:
            stage["head_dim"] = ctx.head_dim
        if ("master_key_path" in declared and not stage.get("master_key_path")
                and stage.get("key_provider", "hkdf") == "hkdf"):
            stage["master_key_path"] = _throwaway_key(ctx.workdir)
            note = f"{stage['type']}: encrypts with a throwaway random key (hkdf)"
            if note not in ctx.notes:
                ctx.notes.append(note)
        if ctx.reduced_layers:
            skipped = [n for n in ("skip_first_layers", "skip_last_layers")
                       if n in declared and n not in stage]
            for name in skipped:
                stage[name] = 0
            if skipped:
                note = (f"{stage['type']}: {', '.join(skipped)} set to 0 (the chunk holds a sample "
                        "of the model's layers; run --layers all to measure the deployed default)")
                if note not in ctx.notes:
                    ctx.notes.append(note)
        completed.append(stage)
    return completed if isinstance(config, list) else completed[0]
