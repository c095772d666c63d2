"""``lmserde plugins``: every installed serde, L2 adapter and hook plugin, from metadata only.

Without ``--load`` no serde or adapter module is imported (nor torch), so the listing is instant
and cannot be broken by a plugin. Hook plugins are always imported (each one contained, as every
processor and wrapper does when it is built): one that fails at import (``SystemExit``
included) is listed as ``failed`` with its error. ``--load`` imports every plugin and reports
failures.
Rows are sorted by name. The table shortens long descriptions; ``--json`` carries them whole.
A plugin built for another core (see :mod:`lmserde.compat`) is listed as ``incompatible`` with
the reason, also without ``--load``. Serdes and L2 adapters are listed by their registries
(:mod:`lmserde.registries`), which know core's own descriptions, size contracts and lossiness
without importing; a plugin's come from its spec, so they are ``null`` unless ``--load``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from lmserde._version import __version__
from lmserde.containment import describe_exception
from lmserde.core_kernel import describe_core_kernel
from lmserde.hooks import hook_plugin_records
from lmserde.plugin_discovery import PluginLoadError, PluginRecord
from lmserde.registries import L2_ADAPTERS
from lmserde.registry import list_serdes
from lmserde.text_table import format_table

__all__ = ["add_parser", "run"]

_MAX_DESCRIPTION = 72


def _shorten(text: str) -> str:
    """A description cut to one table cell."""
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 1] + "…"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plugins", help="list installed serdes, L2 adapters and hook plugins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--load", action="store_true",
                   help="import every plugin and report the ones that fail")
    p.set_defaults(handler=run)


def _hook_rows(load: bool) -> list[dict[str, object]]:
    """Hook plugins, always loaded (contained): every processor, wrapper and other ``lmserde``
    command loads them anyway, so a hook that fails at import is listed as ``failed`` with its
    error, never as ``available``."""
    return _group_rows(hook_plugin_records(), load)


def _group_rows(records: list[PluginRecord], load: bool) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for record in records:
        error = None
        if load and not record.disabled and not record.conflict_with:
            try:
                record.load()
            except PluginLoadError as exc:
                error = str(exc)
        if record.conflict_with:
            error = "also claimed by " + ", ".join(record.conflict_with)
        elif record.incompatible:
            error = record.incompatible
        elif error is None and record.error is not None:
            error = describe_exception(record.error)
        rows.append({"name": record.name, "distribution": record.distribution,
                     "version": record.version, "status": record.status,
                     "description": record.summary,
                     "error": error})
    return sorted(rows, key=lambda r: str(r["name"]))


def run(args: argparse.Namespace) -> int:
    serdes = sorted((asdict(info) for info in list_serdes(load=args.load)),
                    key=lambda s: s["name"])
    adapters = sorted(({"name": e.name, "distribution": e.distribution, "version": e.version,
                        "status": e.status, "description": e.description, "error": e.error}
                       for e in L2_ADAPTERS.entries(load=args.load)), key=lambda r: r["name"])
    hooks = _hook_rows(args.load)
    core = {"version": __version__, "checksum_kernel": describe_core_kernel()}
    if args.json:
        print(json.dumps({"core": core, "serdes": serdes, "l2_adapters": adapters,
                          "hooks": hooks}, indent=2))
        return 0
    print(f"Core: lmserde {__version__}; {_describe_kernel(core['checksum_kernel'])}")
    print()
    headers = ("type", "distribution", "version", "status", "description")
    print("Serdes (entry-point group lmcache.serde)")
    print(format_table(headers, [_cells(s, headers) for s in serdes]))
    for title, rows in (("L2 adapters (lmcache.l2_adapter)", adapters),
                        ("Hook plugins (lmserde.hooks)", hooks)):
        if rows:
            print()
            print(title)
            print(format_table(headers, [_cells(r, headers) for r in rows]))
    failures = [r for r in (*serdes, *adapters, *hooks) if r.get("error")]
    if failures:
        print()
        print("Problems:")
        for r in failures:
            print(f"  {r['name']} ({r['distribution']} {r['version']}): {r['error']}")
    return 0


def _describe_kernel(kernel: dict[str, object]) -> str:
    if kernel.get("backend") == "native":
        return f"{kernel['name']}: native ({kernel['simd']})"
    return f"{kernel['name']}: python fallback — {kernel.get('reason', '')}"


def _cells(row: dict[str, object], headers: tuple[str, ...]) -> list[object]:
    cells: list[object] = []
    for h in headers:
        value = row["name" if h == "type" else h]
        cells.append(_shorten(str(value)) if h == "description" else value)
    return cells
