"""The lmserde conformance kit, for every scaling mode and both fp8 dtypes, on both codec paths."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lmserde.testing import SerdeConformance
from lmserde_fp8 import kernel


class TestFp8Conformance(SerdeConformance):
    serde_type = "fp8"
    max_relative_error = 0.05  # e4m3fn: 3 mantissa bits, normal data


class TestFp8E5m2Conformance(SerdeConformance):
    serde_type = "fp8"
    serde_kwargs = {"fp8_dtype": "float8_e5m2"}
    max_relative_error = 0.1  # 2 mantissa bits


class TestFp8PerTensorConformance(SerdeConformance):
    serde_type = "fp8"
    serde_kwargs = {"scaling": "per_tensor"}
    max_relative_error = 0.05
    detects_corruption = True  # the frame header is checked


class TestFp8PerTokenConformance(SerdeConformance):
    serde_type = "fp8"
    serde_kwargs = {"scaling": "per_token", "fp8_dtype": "float8_e5m2"}
    max_relative_error = 0.1
    detects_corruption = True


class TestFp8TorchCodecConformance(SerdeConformance):
    """The same kit with the native kernels switched off: the pure-torch codec path."""

    serde_type = "fp8"
    serde_kwargs = {"scaling": "per_token"}
    max_relative_error = 0.05
    detects_corruption = True

    @pytest.fixture(autouse=True)
    def _torch_codec_only(self) -> Iterator[None]:
        was = kernel.fast_path_available()
        kernel.set_fast_path_enabled(False)
        try:
            yield
        finally:
            kernel.set_fast_path_enabled(was)
