"""The lmserde conformance kit for the ``zstd`` serde: both codecs, each shuffle mode, a higher level."""

from __future__ import annotations

from lmserde.testing import SerdeConformance


class TestZstdConformance(SerdeConformance):
    serde_type = "zstd"
    detects_corruption = True  # magic and header checksum


class TestZstdPlanesLevel5NoShuffleConformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"level": 5, "shuffle": "none", "min_saving": 0.0, "max_workers": 2}
    detects_corruption = True


class TestZstdBlosc2Conformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"codec": "blosc2"}
    detects_corruption = True


class TestZstdBlosc2BitShuffleConformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"codec": "blosc2", "shuffle": "bit", "level": 5}
    detects_corruption = True


class TestZstdBlosc2NoShuffleConformance(SerdeConformance):
    serde_type = "zstd"
    serde_kwargs = {"codec": "blosc2", "shuffle": "none", "min_saving": 0.0, "nthreads": 2}
    detects_corruption = True
