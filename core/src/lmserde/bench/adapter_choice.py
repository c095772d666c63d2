"""The L2 adapter a bench run stores through: ``--adapter JSON``, or ``fs`` in a temporary directory.

The spec is the adapter's usual spec dict without ``serde`` (the bench sets it for each serde).
A ``base_path`` the adapter requires but the spec leaves out is a fresh temporary directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lmserde.bench.serde_selection import BenchInputError, load_json_arg
from lmserde.l2 import get_l2_adapter_spec

__all__ = ["DEFAULT_ADAPTER", "parse_adapter_arg", "validate_adapter_spec", "complete_adapter_spec"]

#: The adapter of a run without ``--adapter``.
DEFAULT_ADAPTER: dict[str, Any] = {"type": "fs"}


def parse_adapter_arg(text: str) -> dict[str, Any]:
    """An ``--adapter`` argument (a JSON object, or a bare type name) as a spec dict."""
    stripped = text.strip()
    if stripped and stripped[0] not in "{[" and stripped.replace("_", "").replace("-", "").isalnum():
        return {"type": stripped}
    value = load_json_arg("--adapter", text, '{"type": "fs", "base_path": "/mnt/nvme/kv"}')
    if not isinstance(value, dict):
        raise BenchInputError(f"--adapter must be a JSON object, got {type(value).__name__}")
    return value


def validate_adapter_spec(spec: Mapping[str, Any]) -> None:
    """Check the adapter type and options; :class:`BenchInputError` for anything wrong."""
    adapter_type = spec.get("type")
    if not isinstance(adapter_type, str) or not adapter_type:
        raise BenchInputError("--adapter needs a 'type' field naming the L2 adapter (e.g. fs, memory)")
    if "serde" in spec:
        raise BenchInputError(
            "--adapter must not contain 'serde': the bench sets it for each serde it measures "
            "(choose serdes with --serde)"
        )
    try:
        adapter_spec = get_l2_adapter_spec(adapter_type)
        options = {k: v for k, v in spec.items() if k not in ("type", "serde_frame")}
        if not isinstance(spec.get("serde_frame", True), bool):
            raise ValueError(f"'serde_frame' must be true or false, got {spec['serde_frame']!r}")
        if _needs_base_path(adapter_spec, options):
            options["base_path"] = "/nonexistent-placeholder"  # filled in per run
        adapter_spec.validate(adapter_type, options)
    except ValueError as exc:
        raise BenchInputError(f"--adapter: {exc}") from None


def _needs_base_path(adapter_spec: Any, options: Mapping[str, Any]) -> bool:
    declared = {o.name for o in adapter_spec.options or ()}
    return "base_path" in declared and not options.get("base_path")


def complete_adapter_spec(spec: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    """``spec`` with a temporary ``base_path`` under ``workdir`` where one is needed."""
    out = dict(spec)
    adapter_spec = get_l2_adapter_spec(out["type"])
    if _needs_base_path(adapter_spec, {k: v for k, v in out.items()
                                       if k not in ("type", "serde_frame")}):
        path = workdir / "l2"
        path.mkdir(exist_ok=True)
        out["base_path"] = str(path)
    return out
