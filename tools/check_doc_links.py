"""Check that every relative Markdown link in README.md and docs/ resolves to an existing file."""

from __future__ import annotations

import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(root: Path) -> list[str]:
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    files += sorted((root / "plugins").glob("*/README.md"))
    problems: list[str] = []
    for md in files:
        if not md.exists():
            continue
        for lineno, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path = (md.parent / target.split("#", 1)[0]).resolve()
                if not path.exists():
                    problems.append(f"{md.relative_to(root)}:{lineno}: broken link {target}")
    return problems


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    problems = broken_links(root)
    for p in problems:
        print(p)
    print(f"checked links: {'ok' if not problems else f'{len(problems)} broken'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
