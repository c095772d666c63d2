"""The ``zstd`` serde as published under the ``lmcache.serde`` entry point: options and factory.

Data kinds: ``zstd`` consumes KV tensors or plain bytes and produces bytes. It does not consume
ciphertext: encrypted bytes look random, so ``[aesgcm, zstd]`` would spend CPU to store as many
bytes; compress first (``[zstd, aesgcm]``). The reverse order is refused when the config is
created.
"""

from __future__ import annotations

from typing import Any

from lmserde import DataKind, SerdeOption, SerdePair, SerdeSizeContract, SerdeSpec, processor_options

from lmserde_zstd import planes
from lmserde_zstd.frame import VERSION, Shuffle
from lmserde_zstd.serde import (
    CODECS,
    DEFAULT_CODEC,
    DEFAULT_MIN_SAVING,
    ZstdDeserializer,
    ZstdSerializer,
)

__all__ = ["SERDE_TYPE", "ZSTD_OPTIONS", "ZSTD_SPEC", "create_zstd_pair", "create_zstd_processor"]

SERDE_TYPE = "zstd"


def _check_level(value: int) -> None:
    if not 1 <= value <= 9:
        raise ValueError(f"level must be 1..9 (1 fastest, 9 smallest), got {value}")


def _check_min_saving(value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(
            f"min_saving must be a share of the input in [0, 1) (default 1/64 = {DEFAULT_MIN_SAVING}), "
            f"got {value}"
        )


def _check_nthreads(value: int) -> None:
    if not 1 <= value <= 256:
        raise ValueError(f"nthreads must be 1..256, got {value}")


ZSTD_OPTIONS: tuple[SerdeOption, ...] = (
    SerdeOption("codec", str, DEFAULT_CODEC,
                "planes: split the bytes into planes and zstd-code only the planes that compress "
                "(fast; frames need lmserde-zstd >= 0.2 to read); blosc2: byte shuffle + zstd "
                "over every byte (the 0.1 format, slower)", choices=tuple(CODECS)),
    SerdeOption("level", int, 1,
                "compression level 1..9; 1 is fastest and, on KV data, compresses as well as "
                "higher levels (planes: 1 = tuned fast zstd, 2-9 = zstd levels; blosc2: "
                "blosc2's scale)", check=_check_level),
    SerdeOption("shuffle", str, Shuffle.BYTE.value,
                "byte: group byte i of every element before compressing (the exponent bytes of "
                "bf16/fp16 compress, mantissa bytes barely); none; bit (codec blosc2 only)",
                choices=tuple(s.value for s in Shuffle)),
    SerdeOption("min_saving", float, DEFAULT_MIN_SAVING,
                "store the input raw (flagged in the frame) when compression saves less than this "
                "share of it: incompressible data costs a few header bytes, not a decode per load",
                check=_check_min_saving),
    SerdeOption("nthreads", int, 1,
                "blosc2 threads per object (codec blosc2 only: blocks of one chunk in parallel); "
                "max_workers runs separate chunks in parallel", check=_check_nthreads),
    *processor_options(max_workers=1),
)


def create_zstd_pair(kwargs: dict[str, Any]) -> SerdePair:
    """The serializer/deserializer pair for validated kwargs (every option present)."""
    serializer = ZstdSerializer(codec=kwargs["codec"], level=kwargs["level"],
                                shuffle=kwargs["shuffle"],
                                min_saving=kwargs["min_saving"], nthreads=kwargs["nthreads"])
    return SerdePair(serializer, ZstdDeserializer(nthreads=kwargs["nthreads"]))


ZSTD_SPEC = SerdeSpec(
    pair_factory=create_zstd_pair,
    description="lossless byte planes + zstd on the planes that compress; stores incompressible "
                "input raw",
    options=ZSTD_OPTIONS,
    size_contract=SerdeSizeContract.UPPER_BOUND,
    lossy=False,
    consumes=frozenset({DataKind.KV_TENSORS, DataKind.BYTES}),
    produces=DataKind.BYTES,
    consumes_hint="encrypted bytes look random and do not compress: put zstd before the "
                  "encryption stage ([zstd, aesgcm])",
    format_version=VERSION,
    native_status=planes.native_status,
)

#: The processor core builds from :func:`create_zstd_pair` for validated kwargs.
create_zstd_processor = ZSTD_SPEC.processor_factory(SERDE_TYPE)
