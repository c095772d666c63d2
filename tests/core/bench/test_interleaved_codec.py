"""The codec timing of a run's serdes interleaved round by round (lmserde.bench.codec_phase), and
the recommendation comparing serdes on their paired rounds (lmserde.bench.recommend).

The codec tasks really run; the times they report are made up (``_FakeTimes``), so the tests see
exactly which batch of tasks ran when and can put a slow spell where they want it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from lmserde.bench import codec_phase, codec_timing
from lmserde.bench.breakeven import Tier
from lmserde.bench.codec_timing import SerdeTaskError
from lmserde.bench.report import BenchReport
from lmserde.bench.runner import BenchOptions, run_bench

Register = Callable[..., None]
#: base seconds of one batch of tasks: (serde, direction) -> seconds
Base = Callable[[str, str], float]

CHUNKS = 2


@dataclass
class _FakeTimes:
    """Every batch of codec tasks (a serde's serialize or deserialize of its warm-up chunk or of
    every chunk of a round) really runs, and reports ``base(serde, direction)`` seconds, times
    ``slow`` for the batches in ``spell`` (numbered in the order they ran, warm-ups included).
    Every batch takes about as long, so ``spell`` is a stretch of time: a slow spell of a
    shared machine. ``fail`` (serde, direction, round) raises there, after the real tasks."""

    base: Base
    spell: Iterable[int] = ()
    slow: float = 1.0
    fail: tuple[str, str, int, BaseException] | None = None
    batches: list[tuple[str, str, int]] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = codec_timing.run_tasks
        spell = set(self.spell)

        def fake(processor: Any, direction: str, srcs: Any, dsts: Any, keys: Any,
                 **kw: Any) -> float:
            real(processor, direction, srcs, dsts, keys, **kw)
            serde = processor.serde_type
            index = len(self.batches)
            self.batches.append((serde, direction, len(srcs)))
            if self.fail is not None:
                name, when, round_index, exc = self.fail
                rounds = sum(1 for s, d, n in self.batches if (s, d, n) == (name, when, CHUNKS))
                if (serde, direction, len(srcs)) == (name, when, CHUNKS) and rounds == round_index + 1:
                    raise exc
            return self.base(serde, direction) * (self.slow if index in spell else 1.0)

        monkeypatch.setattr(codec_timing, "run_tasks", fake)

    def timed(self) -> list[tuple[str, str]]:
        """The timed batches (every chunk), in order."""
        return [(s, d) for s, d, n in self.batches if n == CHUNKS]


class _RecordingProgress:
    """Each phase: its label, its announced total and the steps reported."""

    def __init__(self) -> None:
        self.phases: list[list[Any]] = []

    def begin(self, label: str, total: int) -> None:
        self.phases.append([label, total, 0])

    def advance(self, steps: int = 1) -> None:
        self.phases[-1][2] += steps

    def end(self) -> None:
        pass

    def assert_steps_add_up(self) -> None:
        for label, total, done in self.phases:
            assert done == total, f"{label}: {done} of {total} steps reported"


def _run(serdes: list[str], repeat: int, progress: Any = None, **kw: Any) -> BenchReport:
    opts = BenchOptions(serdes=[{"type": s} for s in serdes], model="tiny", chunks=CHUNKS,
                        repeat=repeat, max_attn_error=1.0, max_output_error=1.0, **kw)
    return run_bench(opts, progress)


def _rounds(serde: str) -> list[tuple[str, str]]:
    return [(serde, "serialize"), (serde, "deserialize")]


def test_rounds_are_interleaved_rotating_who_goes_first_and_fast_serdes_go_on(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register) -> None:
    """Warm-ups first (each serde its own), then pass after pass one round of every serde, the
    order rotated by one each pass; a serde that has timed less than ``min_seconds`` of encoding
    after ``repeat`` rounds (here ``bench_upper``: 0.06 s per round) goes on alone."""
    test_serdes("bench_halfbyte", "bench_halfbyte2", "bench_upper")
    times = _FakeTimes(lambda serde, d: 0.06 if serde == "bench_upper" else 0.1)
    times.install(monkeypatch)
    progress = _RecordingProgress()
    report = _run(["bench_halfbyte", "bench_halfbyte2", "bench_upper"], 3, progress)
    a, b, c = "bench_halfbyte", "bench_halfbyte2", "bench_upper"
    warm_ups = [(s, d, 1) for s in (a, b, c) for d in ("serialize", "deserialize")]
    assert times.batches[:6] == warm_ups
    passes = [(a, b, c), (b, c, a), (c, a, b), (c,), (c,)]  # 0.06 s x 5 >= 0.25 s
    assert times.timed() == [step for order in passes for s in order for step in _rounds(s)]
    assert [r.codec_rounds for r in report.results] == [3, 3, 5]
    assert all(r.ok and r.codec_interleaved for r in report.results)
    # made-up seconds per round of 2 chunks, per chunk in ms
    assert report.results[2].encode_ms_rounds == pytest.approx([30.0] * 5)
    assert progress.phases[0][:2] == [codec_phase.CODEC_PHASE_LABEL,
                                      codec_phase.codec_phase_steps(3, 3)]
    assert [p[0] for p in progress.phases[1:]] == [a, b, c]
    progress.assert_steps_add_up()


#: 32 KiB chunks of the tiny model (``bench_halfbyte*`` store half) on a 125 kB/s link: raw
#: bytes load in 262 ms, the serdes in 131 ms + their decode (about 50 ms per chunk).
SLOW_LINK = Tier("slow link", 0.000125)


def _halfbyte_times(spell: Iterable[int] = ()) -> _FakeTimes:
    """``bench_halfbyte2`` decodes in 100 ms per round, ``bench_halfbyte`` in 110 ms: 2 chunks,
    so 50 and 55 ms per chunk; encoding 100 ms a round (5 rounds time 0.5 s: ``repeat`` decides).
    The slow spell makes its batches 2.2x slower."""
    def base(serde: str, direction: str) -> float:
        return 0.11 if (serde, direction) == ("bench_halfbyte", "deserialize") else 0.1
    return _FakeTimes(base, spell, slow=2.2)


@pytest.mark.parametrize("spell", [(), range(8, 12)], ids=["quiet", "slow spell"])
def test_a_slow_spell_over_one_round_of_every_serde_does_not_flip_the_recommendation(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register, spell: Iterable[int]) -> None:
    """``bench_halfbyte2`` loads 5 ms per chunk faster than ``bench_halfbyte`` (which would win a
    tie: the same stored bytes, the first label). A slow spell of four batches of tasks: measured
    one serde after another (the old order: warm-up and 5 rounds of ``bench_halfbyte2``, then
    ``bench_halfbyte``) it would be rounds 3 and 4 of ``bench_halfbyte2`` alone, whose interval
    would then reach ``bench_halfbyte``'s (a tie, and ``bench_halfbyte`` recommended);
    interleaved, it is one round of each (batches 8-11 are the second pass), and on their
    paired rounds ``bench_halfbyte`` is slower in every pass: the recommendation stays."""
    test_serdes("bench_halfbyte", "bench_halfbyte2")
    times = _halfbyte_times(spell)
    times.install(monkeypatch)
    report = _run(["bench_halfbyte2", "bench_halfbyte"], 5, tiers=[SLOW_LINK])
    (rec,) = report.recommendations
    assert rec.serde == "bench_halfbyte2" and rec.within_noise == ()
    fast, slow = report.results
    if spell:  # the spell hit round 1 of both: their own intervals overlap, the pairs do not
        assert times.timed()[4:8] == _rounds("bench_halfbyte") + _rounds("bench_halfbyte2")
        assert fast.decode_ms_rounds == pytest.approx([50.0, 110.0, 50.0, 50.0, 50.0])
        assert slow.decode_ms_rounds == pytest.approx([55.0, 121.0, 55.0, 55.0, 55.0])


def test_results_not_timed_together_are_compared_by_overlap_and_the_spell_then_flips_the_pick(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register) -> None:
    """Results not marked ``codec_interleaved`` are compared by the overlap of their own
    intervals: the rounds of the test above as one serde after another would have timed them
    (the spell on two rounds of one serde), or even the interleaved rounds, then end in a tie
    that ``bench_halfbyte`` wins. Interleaving and pairing together keep the answer."""
    from lmserde.bench.recommend import recommend

    test_serdes("bench_halfbyte", "bench_halfbyte2")
    _halfbyte_times(range(8, 12)).install(monkeypatch)
    fast, slow = _run(["bench_halfbyte2", "bench_halfbyte"], 5, tiers=[SLOW_LINK]).results
    old_order = [50.0, 50.0, 50.0, 110.0, 110.0]
    for rounds, paired in ((old_order, False), (fast.decode_ms_rounds, False)):
        fast.decode_ms_rounds, fast.codec_interleaved = rounds, paired
        (rec,) = recommend([fast, slow], [SLOW_LINK], max_attn_error=1.0, max_output_error=1.0)
        assert rec.serde == "bench_halfbyte" and rec.within_noise == ("bench_halfbyte2",)


@pytest.mark.parametrize("direction", ["serialize", "deserialize"])
def test_a_serde_failing_mid_rounds_leaves_the_others_measured_and_every_processor_closed(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register, direction: str) -> None:
    test_serdes("bench_halfbyte", "bench_halfbyte2", "bench_upper")
    exc = SerdeTaskError("bench_halfbyte2 failed: made up")
    times = _FakeTimes(lambda serde, d: 0.1, fail=("bench_halfbyte2", direction, 1, exc))
    times.install(monkeypatch)
    processors = _record_processors(monkeypatch)
    progress = _RecordingProgress()
    report = _run(["bench_halfbyte", "bench_halfbyte2", "bench_upper"], 3, progress)
    a, b, c = report.results
    assert not b.ok and b.error == "SerdeTaskError: bench_halfbyte2 failed: made up"
    assert a.ok and c.ok and a.codec_rounds == c.codec_rounds == 3
    # after its failure in pass 1 the others' rounds go on without it
    assert times.timed()[-4:] == _rounds("bench_upper") + _rounds("bench_halfbyte")
    assert len(processors) == 3 and all(p.closed for p in processors)
    assert [p[0] for p in progress.phases[1:]] == ["bench_halfbyte", "bench_upper"]
    progress.assert_steps_add_up()


def test_an_interrupt_mid_rounds_still_closes_every_processor(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register) -> None:
    test_serdes("bench_halfbyte", "bench_halfbyte2")
    times = _FakeTimes(lambda serde, d: 0.1,
                       fail=("bench_halfbyte", "serialize", 1, KeyboardInterrupt()))
    times.install(monkeypatch)
    processors = _record_processors(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _run(["bench_halfbyte", "bench_halfbyte2"], 3)
    assert len(processors) == 2 and all(p.closed for p in processors)


def _record_processors(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    built: list[Any] = []
    real = codec_phase._build_processor

    def build(config: Any) -> tuple[Any, str]:
        processor, contract = real(config)
        built.append(processor)
        return processor, contract

    monkeypatch.setattr(codec_phase, "_build_processor", build)
    return built


def test_a_processor_failing_to_close_fails_its_serde_only(
        monkeypatch: pytest.MonkeyPatch, test_serdes: Register) -> None:
    """A serde whose processor raises on close (after its last round) is an error, not a
    measurement; the other serdes go on through the data path."""
    test_serdes("bench_halfbyte", "bench_halfbyte2")
    _FakeTimes(lambda serde, d: 0.2).install(monkeypatch)  # 2 rounds time 0.4 s >= 0.25 s
    real = codec_phase._build_processor

    def build(config: Any) -> tuple[Any, str]:
        processor, contract = real(config)
        if config["type"] == "bench_halfbyte":
            close = processor.close

            def broken_close() -> None:
                close()
                raise RuntimeError("close failed")
            processor.close = broken_close
        return processor, contract

    monkeypatch.setattr(codec_phase, "_build_processor", build)
    progress = _RecordingProgress()
    broken, fine = _run(["bench_halfbyte", "bench_halfbyte2"], 2, progress).results
    assert broken.status == "error" and broken.error == "RuntimeError: close failed"
    assert fine.ok and fine.codec_rounds == 2 and fine.quality is not None
    assert [p[0] for p in progress.phases[1:]] == ["bench_halfbyte2"]
    progress.assert_steps_add_up()
