"""Level 1's zstd settings: for planes that compress 2x or more (bf16/fp32 exponents), an
accelerated fast strategy that keeps Huffman-coded literals, through pyzstd (zstd's experimental
literal-compression mode), with a fallback through python-zstandard when pyzstd cannot take it;
for other planes the unaccelerated setting through python-zstandard. Either way the frames are
plain zstd frames the reader accepts."""

from __future__ import annotations

import numpy as np
import pytest
import pyzstd
import torch
import zstandard
from lmserde_zstd import ZstdSerializer, plane_codec
from zstd_support import decode, encode, gaussian, same_bytes


def _skewed_plane(n: int = 1 << 20, seed: int = 0) -> np.ndarray:
    """Bytes with about 2 bits of entropy and no long repeats: what a bf16 exponent plane is
    like. Only Huffman-coded literals compress them; zstd's matches cannot."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(0.5, n), 255).astype(np.uint8)


def _check_frame(frame: bytes, plane: np.ndarray) -> None:
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == plane.size
    assert params.window_size <= 1 << 21
    assert params.dict_id == 0 and not params.has_checksum
    assert pyzstd.get_frame_size(frame) == len(frame)
    assert pyzstd.decompress(frame) == plane.tobytes()
    assert zstandard.ZstdDecompressor().decompress(frame) == plane.tobytes()


def test_level1_goes_through_pyzstd_with_huffman_literals() -> None:
    """The installed pyzstd takes the setting, and the literals are still Huffman-coded: with
    the acceleration alone zstd would store them raw and these bytes would not shrink."""
    assert plane_codec._level1_pyzstd() is not None
    plane = _skewed_plane()
    frame = plane_codec.make_compressor(1, accelerated=True)(plane)
    _check_frame(frame, plane)
    assert plane.size / len(frame) > 3.0


def test_the_acceleration_alone_would_store_literals_raw() -> None:
    """Why the literal-compression mode is set: the same options without it do not compress."""
    options = plane_codec._level1_pyzstd_options()
    del options[plane_codec._LITERAL_COMPRESSION_MODE]
    plane = _skewed_plane()
    frame = pyzstd.ZstdCompressor(options).compress(plane, pyzstd.ZstdCompressor.FLUSH_FRAME)
    assert plane.size / len(frame) < 1.1


class _Refusing:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise pyzstd.ZstdError("unknown parameter")


@pytest.mark.parametrize("how", ["old libzstd", "refused parameter"])
def test_level1_falls_back_to_zstandard(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "old libzstd":
        monkeypatch.setattr(pyzstd, "zstd_version_info", (1, 4, 9))
    else:
        monkeypatch.setattr(pyzstd, "ZstdCompressor", _Refusing)
    assert plane_codec._level1_pyzstd() is None
    plane = _skewed_plane(seed=1)
    frame = plane_codec.make_compressor(1, accelerated=True)(plane)
    _check_frame(frame, plane)
    assert plane.size / len(frame) > 3.0


def test_both_level1_settings_write_frames_that_decode_to_the_same_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    src = gaussian([64, 4096], torch.bfloat16, seed=6)
    accelerated = encode(src, ZstdSerializer(level=1))
    monkeypatch.setattr(plane_codec, "_level1_pyzstd", lambda: None)
    monkeypatch.setattr(plane_codec, "_state", plane_codec._State())  # fresh per-thread cache
    fallback = encode(src, ZstdSerializer(level=1))
    assert accelerated != fallback  # two settings, two encodings
    for frame in (accelerated, fallback):
        assert same_bytes(decode(frame, src.get_layout()), src)


class _Recording(plane_codec._State):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[int, bool]] = []

    def compressor(self, level: int, *, accelerated: bool = False) -> plane_codec.Compress:
        self.asked.append((level, accelerated))
        return super().compressor(level, accelerated=accelerated)


@pytest.mark.parametrize("dtype,accelerated", [
    (torch.bfloat16, True),   # exponent plane about 3x
    (torch.float32, True),    # top plane about 3x
    (torch.float16, False),   # top plane about 1.4x
    (torch.float8_e4m3fn, False),  # codes about 1.2x
], ids=str)
def test_only_planes_that_compress_2x_are_accelerated(monkeypatch: pytest.MonkeyPatch,
                                                      dtype: torch.dtype,
                                                      accelerated: bool) -> None:
    state = _Recording()
    monkeypatch.setattr(plane_codec, "_state", state)
    src = gaussian([64, 4096], dtype, seed=7)
    frame = encode(src, ZstdSerializer(level=1))
    assert ((1, True) in state.asked) == accelerated
    assert same_bytes(decode(frame, src.get_layout()), src)


def test_higher_levels_are_never_accelerated(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _Recording()
    monkeypatch.setattr(plane_codec, "_state", state)
    src = gaussian([64, 4096], torch.bfloat16, seed=7)
    encode(src, ZstdSerializer(level=3))
    assert all(level == 3 for level, _ in state.asked)
