"""``lmserde plugins``: every installed serde, L2 adapter and hook plugin, from metadata only.

Without ``--load`` nothing is imported (neither torch nor any plugin module), so the listing is
instant and cannot be broken by a plugin. ``--load`` imports each plugin and reports failures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from lmserde.cli.table import format_table
from lmserde.hooks import HOOKS_GROUP
from lmserde.plugin_discovery import EntryPointGroup, PluginLoadError
from lmserde.registry import list_serdes

__all__ = ["add_parser", "run"]

L2_ADAPTER_GROUP = "lmcache.l2_adapter"

#: One-line descriptions of the entry points core itself ships (a distribution's metadata has one
#: summary for all its entry points; core knows its own without importing them).
_CORE_DESCRIPTIONS = {
    "identity": "Exact byte copy (baseline; no transform)",
    "memory": "In-process L2 store with optional capacity and eviction",
    "fs": "One file per key under base_path; atomic writes; reports stored sizes",
    "fault": "Wraps another adapter and injects seeded faults (testing)",
}
_MAX_DESCRIPTION = 72


def _describe(name: str, distribution: str, summary: str) -> str:
    text = _CORE_DESCRIPTIONS.get(name, summary) if distribution == "lmserde" else summary
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 1] + "…"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plugins", help="list installed serdes, L2 adapters and hook plugins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--load", action="store_true",
                   help="import every plugin and report the ones that fail")
    p.set_defaults(handler=run)


def _group_rows(group: str, load: bool) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for record in EntryPointGroup(group).records().values():
        error = None
        if load and not record.disabled and not record.conflict_with:
            try:
                record.load()
            except PluginLoadError as exc:
                error = str(exc)
        if record.conflict_with:
            error = "also claimed by " + ", ".join(record.conflict_with)
        rows.append({"name": record.name, "distribution": record.distribution,
                     "version": record.version, "status": record.status,
                     "description": _describe(record.name, record.distribution, record.summary),
                     "error": error})
    return rows


def run(args: argparse.Namespace) -> int:
    serdes = [asdict(info) for info in list_serdes(load=args.load)]
    for s in serdes:
        if not args.load or not s["description"]:
            s["description"] = _describe(s["name"], s["distribution"], s["description"])
    adapters = _group_rows(L2_ADAPTER_GROUP, args.load)
    hooks = _group_rows(HOOKS_GROUP, args.load)
    if args.json:
        print(json.dumps({"serdes": serdes, "l2_adapters": adapters, "hooks": hooks}, indent=2))
        return 0
    headers = ("type", "distribution", "version", "status", "description")
    print("Serdes (entry-point group lmcache.serde)")
    print(format_table(headers, [[s[h if h != "type" else "name"] for h in headers]
                                 for s in serdes]))
    for title, rows in (("L2 adapters (lmcache.l2_adapter)", adapters),
                        ("Hook plugins (lmserde.hooks)", hooks)):
        if rows:
            print()
            print(title)
            print(format_table(headers, [[r[h if h != "type" else "name"] for h in headers]
                                         for r in rows]))
    failures = [r for r in (*serdes, *adapters, *hooks) if r.get("error")]
    if failures:
        print()
        print("Problems:")
        for r in failures:
            print(f"  {r['name']} ({r['distribution']} {r['version']}): {r['error']}")
    return 0
