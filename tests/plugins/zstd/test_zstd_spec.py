"""The published spec: options validated when a config is created, size contract, data kinds."""

from __future__ import annotations

import lmserde
import pytest
from lmserde import SerdeSizeContract, create_serde_processor, get_serde_spec


def test_spec_declares_upper_bound_and_lossless() -> None:
    spec = get_serde_spec("zstd")
    assert spec.size_contract is SerdeSizeContract.UPPER_BOUND
    assert spec.lossy is False
    assert {o.name for o in spec.options or ()} == {
        "codec", "level", "shuffle", "min_saving", "nthreads", "max_workers", "close_timeout_s"}


def test_defaults() -> None:
    opts = get_serde_spec("zstd").validate("zstd", {})
    assert opts == {"codec": "planes", "level": 1, "shuffle": "byte", "min_saving": 1 / 64,
                    "nthreads": 1, "max_workers": 1, "close_timeout_s": 10.0}


def test_numbers_of_the_declared_type_are_taken() -> None:
    opts = get_serde_spec("zstd").validate("zstd", {"level": 3, "nthreads": 2,
                                                    "min_saving": 0.1})
    assert (opts["level"], opts["nthreads"], opts["min_saving"]) == (3, 2, 0.1)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"level": "3"}, "'level' must be an integer"), ({"nthreads": 2.0}, "'nthreads' must be an"),
    ({"min_saving": "0.1"}, "'min_saving' must be a number"),
])
def test_numbers_of_another_type_are_refused(kwargs: dict, message: str) -> None:
    """Issue #27 case 8: strings and floats for ints were coerced."""
    with pytest.raises(ValueError, match=message):
        get_serde_spec("zstd").validate("zstd", kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"level": 0}, "level must be 1..9"),
    ({"level": 10}, "level must be 1..9"),
    ({"shuffle": "nibble"}, "must be one of"),
    ({"codec": "lz4"}, "must be one of"),
    ({"shuffle": "bit"}, "needs codec 'blosc2'"),
    ({"min_saving": 1.0}, "min_saving"),
    ({"min_saving": -0.1}, "min_saving"),
    ({"nthreads": 0}, "nthreads"),
    ({"max_workers": 0}, "max_workers"),
    ({"levle": 3}, "Did you mean 'level'"),
], ids=str)
def test_invalid_options_are_refused_when_the_config_is_created(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_serde_processor({"type": "zstd", **kwargs})


@pytest.mark.parametrize("codec,wire", [("planes", 2), ("blosc2", 1)])
def test_the_codec_option_picks_the_codec(codec: str, wire: int) -> None:
    import torch
    from zstd_support import encode, gaussian

    proc = create_serde_processor({"type": "zstd", "codec": codec})
    try:
        frame = encode(gaussian([16, 256], torch.bfloat16), proc.serializer)
    finally:
        proc.close()
    assert frame[5] == wire


def test_bit_shuffle_with_blosc2_is_accepted() -> None:
    create_serde_processor({"type": "zstd", "codec": "blosc2", "shuffle": "bit"}).close()


def test_spec_declares_its_data_kinds() -> None:
    kind = lmserde.DataKind
    spec = get_serde_spec("zstd")
    assert spec.consumes == frozenset({kind.KV_TENSORS, kind.BYTES})
    assert spec.produces is kind.BYTES
