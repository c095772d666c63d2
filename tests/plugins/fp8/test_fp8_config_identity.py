"""fp8's config identity: ``fp8_dtype`` and ``scaling`` change ``get_config()``, ``max_workers``
does not; equal identity options give equal configs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import create_serde_processor

_dtypes = st.sampled_from(["float8_e4m3fn", "float8_e5m2"])
_scalings = st.sampled_from(["none", "per_tensor", "per_token"])
_workers = st.integers(min_value=1, max_value=4)


def _config(dtype: str, scaling: str, workers: int) -> dict[str, object]:
    proc = create_serde_processor({"type": "fp8", "fp8_dtype": dtype, "scaling": scaling,
                                   "max_workers": workers})
    try:
        return proc.get_config()
    finally:
        proc.close()


@settings(max_examples=40)
@given(a=st.tuples(_dtypes, _scalings, _workers), b=st.tuples(_dtypes, _scalings, _workers))
def test_equal_configs_iff_equal_identity_options(a: tuple[str, str, int],
                                                  b: tuple[str, str, int]) -> None:
    assert (_config(*a) == _config(*b)) is (a[:2] == b[:2])


def test_config_contents() -> None:
    assert _config("float8_e5m2", "none", 3) == {
        "type": "fp8", "format_version": 1,
        "options": {"fp8_dtype": "float8_e5m2", "scaling": "none"}}
    assert _config("float8_e4m3fn", "none", 1) != _config("float8_e5m2", "none", 1)
