"""Runnable examples in the docs: a fenced ``python`` block (or, for a configuration, ``json``) right
after ``<!-- example: NAME ... -->``, and the fenced ``sh`` blocks of a README."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_BLOCK = r"<!-- example: {name}\b[^>]*-->\s*```{lang}\n(.*?)\n```"


def doc_example(relative_path: str, name: str, lang: str = "python") -> str:
    """The source of example ``name`` (a fenced ``lang`` block) in ``relative_path``
    (``LookupError`` when it is missing)."""
    text = (REPO / relative_path).read_text(encoding="utf-8")
    match = re.search(_BLOCK.format(name=re.escape(name), lang=re.escape(lang)), text, re.DOTALL)
    if match is None:
        raise LookupError(f"{relative_path} has no example '{name}'")
    return match.group(1) + "\n"


def shell_blocks(markdown: str) -> list[str]:
    """The fenced ```` ```sh ```` blocks of ``markdown``, in order (each ends with a newline)."""
    return [m + "\n" for m in re.findall(r"^```sh\n(.*?)\n```$", markdown, re.DOTALL | re.MULTILINE)]
