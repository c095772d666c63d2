"""Quality of decoded KV chunks against the originals: tensor errors and attention fidelity.

Tensor metrics, per K and V and over both: relative MSE (``sum (x'-x)^2 / sum x^2``), mean cosine
similarity of the per-(layer, token, head) vectors, max abs error, the count of non-finite decoded
values (treated as 0 in every other metric) and whether the bytes are identical. Attention
fidelity: for ``queries`` random standard-Gaussian queries per (layer, KV head) against the chunk's
keys, the relative RMS error and max abs error of the logits ``q.k/sqrt(D)``, the mean
total-variation distance of the softmax weights over the chunk's tokens (half the L1 distance:
the share of attention mass that moves), their max abs error, and the relative RMS error of the
attention output (weights x values). Differences are computed in float32 and accumulated over
chunks in float64. What depends only on the original chunk is computed once
(:class:`ChunkReference`) and shared by every serde.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lmserde.bench.kv_chunk import KVChunk
from lmserde.bench.kv_generators import derive_seed
from lmserde.bench.run_defaults import DEFAULT_QUERIES

__all__ = ["TensorError", "QualityMetrics", "ChunkReference", "QualityAccumulator"]


@dataclass(frozen=True)
class TensorError:
    """Errors of one decoded tensor family (K, V, or both)."""

    rel_mse: float
    cosine: float
    max_abs_err: float
    bit_exact: bool
    nonfinite: int


@dataclass(frozen=True)
class QualityMetrics:
    """Everything the bench reports about decode quality."""

    keys: TensorError
    values: TensorError
    overall: TensorError
    attn_logit_rel_err: float
    attn_logit_max_abs_err: float
    attn_weight_tv: float
    attn_weight_max_abs_err: float
    attn_output_rel_err: float
    queries_per_head: int

    @property
    def bit_exact(self) -> bool:
        return self.overall.bit_exact


def _vectors(t: torch.Tensor) -> torch.Tensor:
    """``[L, T, H, D]`` as float32 ``[L*T*H, D]``."""
    return t.to(torch.float32).reshape(-1, t.shape[-1])


def _attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits ``[L, H, Q, T]``, softmax weights and outputs ``[L, H, Q, D]`` in float32."""
    k = keys.to(torch.float32).permute(0, 2, 1, 3)  # [L, H, T, D]
    v = values.to(torch.float32).permute(0, 2, 1, 3)
    logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(keys.shape[-1])
    weights = torch.softmax(logits, dim=-1)
    return logits, weights, torch.matmul(weights, v)


class ChunkReference:
    """What the metrics need from one original chunk: its per-vector norms and the reference
    attention of ``queries`` queries per (layer, head), drawn from ``seed`` and the chunk's start."""

    def __init__(self, chunk: KVChunk, *, seed: int = 0, queries: int = DEFAULT_QUERIES) -> None:
        if queries < 1:
            raise ValueError(f"queries per head must be >= 1, got {queries}")
        self.chunk = chunk
        self.queries = queries
        self.seed = seed
        L, _, H, D = chunk.keys.shape
        g = torch.Generator()
        g.manual_seed(derive_seed("lmserde-bench-queries", seed, chunk.start_position))
        self.q = torch.randn(L, H, queries, D, generator=g, dtype=torch.float32)
        self.norms_sq = {}
        for name, t in (("keys", chunk.keys), ("values", chunk.values)):
            vec = _vectors(t)
            self.norms_sq[name] = (vec * vec).sum(dim=-1)
        self.logits, self.weights, self.out = _attention(self.q, chunk.keys, chunk.values)
        self.logits_sq = float(torch.dot(self.logits.flatten(), self.logits.flatten()))
        self.out_sq = float(torch.dot(self.out.flatten(), self.out.flatten()))


class _TensorStats:
    def __init__(self) -> None:
        self.sq_err = 0.0
        self.sq_ref = 0.0
        self.cos_sum = 0.0
        self.vectors = 0
        self.max_abs = 0.0
        self.exact = True
        self.nonfinite = 0

    def add(self, ref: torch.Tensor, ref_norms_sq: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:
        """Accumulate; returns ``dec`` as float32 vectors with non-finite values zeroed."""
        self.exact &= bool(torch.equal(ref.reshape(-1).view(torch.uint8),
                                       dec.reshape(-1).view(torch.uint8)))
        r, d = _vectors(ref), _vectors(dec)
        diff = (d - r).flatten()
        sq_err = float(torch.dot(diff, diff))
        if not math.isfinite(sq_err):  # rare: find and neutralise the non-finite values
            finite = torch.isfinite(d)
            self.nonfinite += int(finite.numel() - int(finite.sum()))
            d = torch.where(finite, d, torch.zeros(()))
            diff = (d - r).flatten()
            sq_err = float(torch.dot(diff, diff))
        self.sq_err += sq_err
        self.sq_ref += float(ref_norms_sq.sum(dtype=torch.float64))
        if diff.numel():
            self.max_abs = max(self.max_abs, float(torch.linalg.vector_norm(diff, ord=math.inf)))
        dots = (r * d).sum(dim=-1)
        dec_norms_sq = (d * d).sum(dim=-1)
        cos = dots / torch.sqrt(ref_norms_sq * dec_norms_sq).clamp_min(1e-30)
        self.cos_sum += float(cos.clamp(-1.0, 1.0).sum(dtype=torch.float64))
        self.vectors += r.shape[0]
        return d

    def merged(self, other: _TensorStats) -> _TensorStats:
        out = _TensorStats()
        out.sq_err = self.sq_err + other.sq_err
        out.sq_ref = self.sq_ref + other.sq_ref
        out.cos_sum = self.cos_sum + other.cos_sum
        out.vectors = self.vectors + other.vectors
        out.max_abs = max(self.max_abs, other.max_abs)
        out.exact = self.exact and other.exact
        out.nonfinite = self.nonfinite + other.nonfinite
        return out

    def result(self) -> TensorError:
        rel = self.sq_err / self.sq_ref if self.sq_ref > 0 else (0.0 if self.sq_err == 0 else math.inf)
        cosine = 1.0 if self.exact or not self.vectors else self.cos_sum / self.vectors
        return TensorError(rel, cosine, self.max_abs, self.exact, self.nonfinite)


@dataclass
class _AttentionSums:
    """Running sums of the attention errors over every chunk compared: squared logit errors and
    their reference, the largest logit error, the total variation of the weights per query row,
    the largest weight error, squared output errors and their reference."""

    logit_sq_err: float = 0.0
    logit_sq_ref: float = 0.0
    logit_max: float = 0.0
    tv_sum: float = 0.0
    rows: int = 0
    weight_max: float = 0.0
    out_sq_err: float = 0.0
    out_sq_ref: float = 0.0

    def add(self, ref: ChunkReference, logits: torch.Tensor, weights: torch.Tensor,
            out: torch.Tensor) -> None:
        """Add one chunk's attention (``logits``, ``weights``, ``out`` computed from the decoded
        K/V) against ``ref``'s."""
        diff = (logits - ref.logits).flatten()
        self.logit_sq_err += float(torch.dot(diff, diff))
        self.logit_sq_ref += ref.logits_sq
        self.logit_max = max(self.logit_max, float(torch.linalg.vector_norm(diff, ord=math.inf)))
        wdiff = (weights - ref.weights).abs()
        self.tv_sum += 0.5 * float(wdiff.sum(dtype=torch.float64))
        self.rows += wdiff.numel() // wdiff.shape[-1]
        self.weight_max = max(self.weight_max, float(wdiff.max()))
        odiff = (out - ref.out).flatten()
        self.out_sq_err += float(torch.dot(odiff, odiff))
        self.out_sq_ref += ref.out_sq


class QualityAccumulator:
    """Accumulates :class:`QualityMetrics` over chunks.

    :meth:`add` takes a :class:`KVChunk` (its reference is computed on the spot, with this
    accumulator's ``seed`` and ``queries``) or a precomputed :class:`ChunkReference`.
    """

    def __init__(self, *, seed: int = 0, queries: int = DEFAULT_QUERIES) -> None:
        if queries < 1:
            raise ValueError(f"queries per head must be >= 1, got {queries}")
        self.seed = seed
        self.queries = queries
        self._k = _TensorStats()
        self._v = _TensorStats()
        self._attention = _AttentionSums()
        self._queries_seen: int | None = None

    def add(self, original: KVChunk | ChunkReference, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Compare decoded ``keys``/``values`` (``[L, T, H, D]``) with the original chunk."""
        ref = (original if isinstance(original, ChunkReference)
               else ChunkReference(original, seed=self.seed, queries=self.queries))
        chunk = ref.chunk
        if keys.shape != chunk.keys.shape or values.shape != chunk.values.shape:
            raise ValueError(
                f"decoded shapes {list(keys.shape)}/{list(values.shape)} differ from the original "
                f"{list(chunk.keys.shape)}"
            )
        k = self._k.add(chunk.keys, ref.norms_sq["keys"], keys).view(keys.shape)
        v = self._v.add(chunk.values, ref.norms_sq["values"], values).view(values.shape)
        self._attention.add(ref, *_attention(ref.q, k, v))
        self._queries_seen = ref.queries

    def result(self) -> QualityMetrics:
        """The metrics over every chunk added so far (at least one)."""
        sums = self._attention
        if not sums.rows:
            raise ValueError("no chunk was compared")

        def rel(err: float, ref: float) -> float:
            return math.sqrt(err / ref) if ref > 0 else (0.0 if err == 0 else math.inf)

        return QualityMetrics(
            keys=self._k.result(),
            values=self._v.result(),
            overall=self._k.merged(self._v).result(),
            attn_logit_rel_err=rel(sums.logit_sq_err, sums.logit_sq_ref),
            attn_logit_max_abs_err=sums.logit_max,
            attn_weight_tv=sums.tv_sum / sums.rows,
            attn_weight_max_abs_err=sums.weight_max,
            attn_output_rel_err=rel(sums.out_sq_err, sums.out_sq_ref),
            queries_per_head=self._queries_seen or self.queries,
        )
