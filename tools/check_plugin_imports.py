"""Check that plugin packages import only the public lmserde API.

Allowed: ``lmserde`` itself and its public submodules listed in ``PUBLIC_MODULES``. Anything else
(``lmserde._version``, ``lmserde.memory``, ...) is reported, so a third-party plugin has exactly the
power of a built-in one. Exit status 1 when a violation is found.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PUBLIC_MODULES = frozenset({"lmserde", "lmserde.testing", "lmserde.l1", "lmserde.l2",
                            "lmserde.bench", "lmserde.tenant_keys"})


def violations(root: Path) -> list[str]:
    """``path:line: module`` for every non-public lmserde import under ``root``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
                if node.module.split(".")[0] == "lmserde":
                    modules += [f"{node.module}.{a.name}" for a in node.names
                                if a.name.startswith("_") and not a.name.startswith("__")]
            for module in modules:
                if module.split(".")[0] != "lmserde":
                    continue
                if module not in PUBLIC_MODULES:
                    found.append(f"{path}:{node.lineno}: imports non-public '{module}'")
    return found


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or sorted(Path("plugins").glob("*/src"))
    problems = [v for root in roots for v in violations(root)]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
