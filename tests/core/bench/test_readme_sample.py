"""The README's ``lmserde bench`` sample says where it comes from, and its frame line is one the
current code prints (so a change of the line's wording cannot leave a stale sample behind)."""

from __future__ import annotations

import re
from pathlib import Path

from lmserde.bench.frame_overhead import describe_frame_overhead

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()
SECTION = README[README.index("## Which serde should my L2 tier use?"):
                 README.index("## Configuration")]


def test_the_sample_names_its_machine_date_and_command() -> None:
    label = SECTION[:SECTION.index("```")]
    assert "`lmserde bench`" in label
    assert re.search(r"\bon \d{4}-\d{2}-\d{2}\b", label), "the date of the run"
    assert re.search(r"\d+ vCPUs of an? [A-Z]", label), "the CPU and its cores"
    assert "torch 2.13.0" in label and "will differ" in label


def test_the_frame_line_is_what_the_bench_prints() -> None:
    line = next(x for x in SECTION.splitlines() if x.startswith("stored-object frame:"))
    numbers = re.search(
        r"through (?P<serde>\w+): (?P<unframed>[\d.]+) ms unframed, the frame's cost is within "
        r"noise \(paired median (?P<extra>[-+][\d.]+) ms, [-+][\d.]+%; 95% interval "
        r"(?P<lo>[-+][\d.]+)% to (?P<hi>[-+][\d.]+)%, (?P<pairs>\d+) pairs in (?P<rounds>\d+) "
        r"rounds\)$", line)
    assert numbers is not None, line
    unframed, extra = float(numbers["unframed"]), float(numbers["extra"])
    frame = {"serde": numbers["serde"], "bytes_per_object": 64, "chunk_bytes": 32 << 20,
             "unframed_ms": unframed, "paired_extra_ms": extra,
             "paired_overhead": extra / unframed, "within_noise": True,
             "paired_overhead_interval": [float(numbers["lo"]) / 100, float(numbers["hi"]) / 100],
             "paired_interval_coverage": 0.9586, "pairs": int(numbers["pairs"]),
             "rounds": int(numbers["rounds"])}
    assert describe_frame_overhead(frame) == line
