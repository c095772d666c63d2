"""The user guide's serde table lists every serde of this repository with its distribution."""

from __future__ import annotations

import re
from pathlib import Path

from lmserde.install_hints import KNOWN_PROVIDERS, SERDE_GROUP

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
ROW = re.compile(r"^\| `(?P<type>[a-z0-9_]+)` \| `(?P<dist>[a-z0-9-]+)` \|", re.MULTILINE)


def test_every_serde_of_this_repository_has_a_row_naming_its_distribution() -> None:
    rows = {m["type"]: m["dist"] for m in ROW.finditer(GUIDE.read_text())}
    expected = {"identity": "lmserde", **KNOWN_PROVIDERS[SERDE_GROUP]}
    assert {t: rows.get(t) for t in expected} == expected
