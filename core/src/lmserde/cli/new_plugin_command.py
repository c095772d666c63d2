"""``lmserde new-plugin NAME``: write a ready-to-install serde plugin package from the template."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lmserde.cli.exit_codes import EXIT_USAGE
from lmserde.plugin_template import create_plugin, plugin_names

__all__ = ["add_parser", "run"]



def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "new-plugin", help="create a serde plugin package (pyproject, serde, tests, README)",
        description="Create lmserde-NAME/: a pip-installable serde plugin whose entry point, "
                    "declared options, conformance tests and README are ready; in this "
                    "environment install it with `pip install -e DIR[test]` and run `pytest DIR` "
                    "(its README says how to start from a fresh venv).")
    p.add_argument("name", help="serde type name users write in configs (lowercase, digits, _)")
    p.add_argument("--directory", "-d", type=Path, default=None,
                   help="where to write it (default: ./lmserde-NAME); must not exist or be empty")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        names = plugin_names(args.name)
        directory = args.directory or Path(names["distribution"])
        files = create_plugin(args.name, directory)
    except ValueError as exc:
        print(f"lmserde new-plugin: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"created {names['distribution']} in {directory}:")
    for path in files:
        print(f"  {path.relative_to(directory)}")
    print(f"next: pip install -e '{directory}[test]' && pytest {directory}  "
          f"(a fresh venv: see {directory / 'README.md'})")
    return 0
