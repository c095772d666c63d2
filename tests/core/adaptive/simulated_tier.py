"""A simulated tier for the ``auto`` policy's tests: candidates with known codec speeds and
ratios, an adapter whose bandwidth the test sets (and changes), multiplicative noise from a
seeded generator. Every object is decided, stored and loaded once, in that order; no clock."""

from __future__ import annotations

import random
from dataclasses import dataclass

from lmserde.adaptive import AutoPolicy, Candidate, PolicySettings

GB = 1e9
#: A full Llama-3-8B chunk.
CHUNK = 32 << 20


@dataclass(frozen=True)
class TrueCodec:
    """What a candidate really does: encode / decode speeds (raw GB/s) and its ratio."""

    candidate: Candidate
    encode_gbps: float
    decode_gbps: float
    ratio: float


IDENTITY = TrueCodec(Candidate("identity", lossy=False), 10.0, 10.0, 1.0)
FP8 = TrueCodec(Candidate("fp8", lossy=True, attention_error=0.019), 3.0, 4.0, 2.0)
FP8_ZSTD = TrueCodec(Candidate("fp8+zstd", lossy=True, attention_error=0.019), 0.8, 1.0, 2.6)
DEFAULT_CODECS = (IDENTITY, FP8, FP8_ZSTD)


class SimulatedTier:
    """Runs objects through a policy: ``store_gbps`` / ``load_gbps`` may change between calls."""

    def __init__(self, codecs: tuple[TrueCodec, ...] = DEFAULT_CODECS, *, gbps: float = 10.0,
                 noise: float = 0.0, seed: int = 0, settings: PolicySettings | None = None,
                 emit_events: bool = False) -> None:
        self.codecs = codecs
        self.store_gbps = self.load_gbps = gbps
        self.noise = noise
        self.rng = random.Random(seed)
        self.policy = AutoPolicy([c.candidate for c in codecs], settings,
                                 name="simulated", emit_events=emit_events)
        self.choices: list[int] = []

    def _jitter(self) -> float:
        return 1.0 + self.noise * (2.0 * self.rng.random() - 1.0)

    def run(self, objects: int, raw: int = CHUNK) -> list[int]:
        """Decide, store and load ``objects`` objects; the candidate indices chosen."""
        chosen = []
        for _ in range(objects):
            i = self.policy.decide()
            codec = self.codecs[i]
            stored = int(raw / codec.ratio)
            self.policy.observe_store(i, raw, stored, raw / (codec.encode_gbps * GB) * self._jitter(),
                                      stored / (self.store_gbps * GB) * self._jitter())
            self.policy.observe_load(i, raw, stored, raw / (codec.decode_gbps * GB) * self._jitter(),
                                     stored / (self.load_gbps * GB) * self._jitter())
            chosen.append(i)
        self.choices += chosen
        return chosen

    def name(self, index: int) -> str:
        return self.codecs[index].candidate.name
