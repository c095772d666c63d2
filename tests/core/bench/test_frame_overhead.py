"""The paired framed/unframed measurement behind ``lmserde bench``'s frame line and
``benchmarks/bench_frame.py``: real adapters on a real directory, every store and load done."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc
from lmserde.bench import frame_overhead
from lmserde.bench.data_path import DataPathError
from lmserde.bench.frame_overhead import (
    describe_frame_overhead,
    frame_overhead_steps,
    full_size_chunks,
    measure_frame_overhead,
)
from lmserde.l2 import FRAME_HEADER_BYTES

CHUNK = 256 << 10


def _chunks(n: int = 2) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(0, 256, (CHUNK,), dtype=torch.uint8, generator=gen) for _ in range(n)]


def test_both_modes_store_and_load_every_chunk_in_their_own_directory(tmp_path: Path) -> None:
    steps: list[int] = []
    found = measure_frame_overhead({"type": "fs", "base_path": str(tmp_path)},
                                   {"type": "identity"}, _chunks(), 3,
                                   on_step=lambda: steps.append(1))
    assert len(steps) == frame_overhead_steps(3, 2) == 4 * 2 * 2 * 2  # warm-up round included
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frame-framed", "frame-unframed"]
    assert found["serde"] == "identity" and found["chunk_bytes"] == CHUNK
    assert found["bytes_per_object"] == FRAME_HEADER_BYTES and found["rounds"] == 3
    # what the adapter reported storing: the payload, plus the header when framed
    assert found["unframed_object_bytes"] == CHUNK
    assert found["framed_object_bytes"] == CHUNK + FRAME_HEADER_BYTES
    for mode in ("framed", "unframed"):
        assert found[f"{mode}_ms"] == pytest.approx(found[f"{mode}_store_ms"]
                                                    + found[f"{mode}_load_ms"])
    assert found["overhead"] == pytest.approx(found["framed_ms"] / found["unframed_ms"] - 1)
    assert found["paired_overhead"] == pytest.approx(found["paired_extra_ms"]
                                                     / found["unframed_ms"])
    lo, hi = found["overhead_range"]
    assert lo <= hi
    line = describe_frame_overhead(found)
    assert line is not None and "0.2 MiB chunk through identity" in line and "3 rounds" in line
    assert "paired" in line


def test_the_paired_overhead_is_the_median_difference_of_each_chunks_two_modes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each framed store + load is compared with the unframed one of the same chunk in the same
    round (the two modes take turns chunk by chunk): with made-up timings in which every framed
    operation takes 2 ms more than its unframed partner, whatever the chunk's own time (one
    chunk in three hit by a slow spell), the paired extra time is exactly 4 ms."""
    _fake_timings(monkeypatch, lambda pair: 0.002)
    found = measure_frame_overhead({"type": "fs", "base_path": str(tmp_path)},
                                   {"type": "identity"}, _chunks(3), 2)
    assert found["paired_extra_ms"] == pytest.approx(4.0)  # +2 ms store, +2 ms load
    assert found["paired_overhead"] == pytest.approx(4.0 / found["unframed_ms"])
    # a steady cost: every pair says +4 ms, so does the interval, and the line gives the number
    assert found["pairs"] == 6 and found["within_noise"] is False
    assert found["paired_extra_ms_interval"] == pytest.approx([4.0, 4.0])
    line = describe_frame_overhead(found)
    assert line is not None and "framed +4.00 ms (" in line and "within noise" not in line
    assert "interval" in line and "6 pairs in 2 rounds" in line


def _fake_timings(monkeypatch: pytest.MonkeyPatch, extra_s: Callable[[int], float]) -> None:
    """Real stores and loads, reported with made-up times: a chunk's own time (one chunk in
    three hit by a slow spell) plus, when framed, ``extra_s(pair)``."""
    calls = [0]

    def fake(op: str) -> object:
        real = getattr(frame_overhead._Rounds, op)

        def timed(self: object, framed: bool, *args: object) -> tuple[float, float]:
            real(self, framed, *args)
            pair = calls[0] // 2  # the two modes of one chunk come one after the other
            calls[0] += 1
            base = 0.050 if pair % 3 == 2 else 0.008
            return base + (extra_s(pair) if framed else 0.0), 0.0
        return timed

    monkeypatch.setattr(frame_overhead._Rounds, "store", fake("store"))
    monkeypatch.setattr(frame_overhead._Rounds, "load", fake("load"))


def test_a_difference_the_noise_swamps_is_reported_as_within_noise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made-up timings in which each framed operation costs 0.5 ms more than its partner plus
    noise of 3 ms (standard deviation): the median difference has a sign, but its
    interval reaches 0, and the line says so instead of printing a percentage a rerun could
    flip."""
    rng = random.Random(5)
    swings = [0.0005 + rng.gauss(0.0, 0.003) for _ in range(200)]
    _fake_timings(monkeypatch, lambda pair: swings[pair])
    found = measure_frame_overhead({"type": "fs", "base_path": str(tmp_path)},
                                   {"type": "identity"}, _chunks(4), 5)
    assert found["pairs"] == 20 and found["paired_interval_coverage"] >= 0.95
    lo, hi = found["paired_extra_ms_interval"]
    assert lo < 0 < hi and found["within_noise"] is True
    assert found["paired_extra_ms"] != 0
    line = describe_frame_overhead(found)
    assert line is not None and "the frame's cost is within noise (paired median " in line
    assert "95% interval -" in line and "20 pairs in 5 rounds" in line


@pytest.mark.parametrize("cold", [True, False])
def test_sources_are_written_long_before_their_store_unless_asked_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cold: bool) -> None:
    """DRAM regime by default: every L1 object of a round is written before its first store (a
    store's source is no longer in the CPU cache); ``cold_sources=False`` writes each one just
    before its store."""
    events: list[str] = []
    fill, store = frame_overhead._Rounds.fill, frame_overhead._Rounds.store
    monkeypatch.setattr(frame_overhead._Rounds, "fill",
                        lambda self, *a: (events.append("fill"), fill(self, *a))[1])
    monkeypatch.setattr(frame_overhead._Rounds, "store",
                        lambda self, *a: (events.append("store"), store(self, *a))[1])
    measure_frame_overhead({"type": "fs", "base_path": str(tmp_path)}, {"type": "identity"},
                           _chunks(3), 1, cold_sources=cold)
    per_round = 3 * 2  # chunks x modes
    assert len(events) == 2 * 2 * per_round  # warm-up + 1 round, a fill and a store each
    for first in (0, 2 * per_round):
        round_events = events[first:first + 2 * per_round]
        expected = (["fill"] * per_round + ["store"] * per_round if cold
                    else ["fill", "store"] * per_round)
        assert round_events == expected


def test_a_layout_that_does_not_match_the_chunks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout"):
        measure_frame_overhead({"type": "fs", "base_path": str(tmp_path)}, {"type": "identity"},
                               _chunks(1), 1, layout=MemoryLayoutDesc([[10]], [torch.uint8]))


@pytest.mark.parametrize("fault,message", [("store_failure_rate", "store through"),
                                           ("load_miss_rate", "missed")])
def test_a_failed_store_or_a_missed_load_is_an_error_not_a_number(
        tmp_path: Path, fault: str, message: str) -> None:
    spec = {"type": "fault", fault: 1.0, "inner": {"type": "fs", "base_path": str(tmp_path)}}
    with pytest.raises(DataPathError, match=message):
        measure_frame_overhead(spec, {"type": "identity"}, _chunks(1), 1)


def test_full_size_chunks_repeat_the_sample_bytes() -> None:
    part = torch.arange(10, dtype=torch.int16)
    full, = full_size_chunks([part], 45)
    raw = part.view(torch.uint8)
    assert full.dtype == torch.uint8 and full.numel() == 45
    assert torch.equal(full[:20], raw) and torch.equal(full[40:], raw[:5])
