"""``ChunkSource``: the KV chunks of one bench run (synthetic or from a file) and their description."""

from __future__ import annotations

from typing import Any

from lmserde.bench.kv_chunk import KVChunk
from lmserde.bench.kv_files import KVFileSource
from lmserde.bench.kv_generators import SyntheticKVGenerator
from lmserde.bench.model_shapes import get_model_shape
from lmserde.bench.serde_selection import BenchInputError

__all__ = ["ChunkSource"]


class ChunkSource:
    """``chunks`` chunks from ``kv_file``, or else from the built-in generator of ``model``.

    ``layers`` is a maximum (evenly spaced layers, first and last included; ``None``: all);
    ``tokens`` the chunk size (``None``: the model's, or 256 for a file). ``description`` is the
    JSON ``source`` block; ``notes`` says what was adjusted. Bad input raises
    :class:`~lmserde.bench.serde_selection.BenchInputError`.
    """

    def __init__(self, kv_file: str | None, *, model: str, seed: int, chunks: int,
                 layers: int | None, tokens: int | None) -> None:
        self.notes: list[str] = []
        self.chunks: list[KVChunk]
        try:
            if kv_file is not None:
                self._from_file(kv_file, chunks, layers, tokens)
            else:
                self._from_generator(model, seed, chunks, layers, tokens)
        except ValueError as exc:
            raise BenchInputError(str(exc)) from None
        first = self.chunks[0]
        self.description.update({
            "layers_per_chunk": first.num_layers, "layer_ids": list(first.layer_ids),
            "tokens_per_chunk": first.num_tokens, "kv_heads": first.num_heads,
            "head_dim": first.head_dim, "dtype": str(first.dtype).removeprefix("torch."),
            "chunk_bytes": first.nbytes,
            "full_chunk_bytes": first.nbytes // first.num_layers * self.total_layers,
            "chunks": len(self.chunks),
        })

    def _from_file(self, path: str, chunks: int, layers: int | None, tokens: int | None) -> None:
        source = KVFileSource(path, layers=layers, tokens=tokens)
        available = source.num_chunks
        if chunks > available:
            self.notes.append(f"{path} holds {available} chunk(s) of {source.tokens} tokens; "
                              f"using {available} instead of {chunks}")
        self.chunks = [source.chunk(i) for i in range(min(chunks, available))]
        self.total_layers = source.file_layers
        self.description: dict[str, Any] = {
            "kind": "file", "path": str(source.path), "file_layers": source.file_layers,
            "file_tokens": source.file_tokens,
        }

    def _from_generator(self, model: str, seed: int, chunks: int, layers: int | None,
                        tokens: int | None) -> None:
        shape = get_model_shape(model)
        gen = SyntheticKVGenerator(shape, seed=seed, tokens=tokens,
                                   layers=None if layers is None else min(layers, shape.num_layers))
        self.chunks = [gen.chunk(i) for i in range(chunks)]
        self.total_layers = shape.num_layers
        self.description = {
            "kind": "synthetic", "model": shape.name, "model_description": shape.description,
            "model_layers": shape.num_layers, "seed": seed,
        }

    @property
    def reduced(self) -> bool:
        """Whether the chunks hold only some of the model's (or file's) layers."""
        return self.chunks[0].num_layers < self.total_layers
