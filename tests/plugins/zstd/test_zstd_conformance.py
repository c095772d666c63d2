"""The lmserde conformance kit for the ``zstd`` serde, in each shuffle mode and at a higher level."""

from __future__ import annotations

from lmserde.testing import SerdeConformance


class TestZstdConformance(SerdeConformance):
    serde_type = "zstd"
    detects_corruption = True  # magic and header checksum


class TestZstdBitShuffleConformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"shuffle": "bit", "level": 5}
    detects_corruption = True


class TestZstdNoShuffleConformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"shuffle": "none", "min_saving": 0.0, "nthreads": 2}
    detects_corruption = True
