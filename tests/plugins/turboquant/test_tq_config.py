"""Configuration and the registered spec: options validated when the config is created."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest
from lmserde import SerdeSizeContract, create_serde_processor, get_serde_spec
from lmserde_turboquant import TURBOQUANT_SPEC, TurboQuantConfig
from lmserde_turboquant import config as config_module


def _make(**kwargs: Any) -> Any:
    return create_serde_processor({"type": "turboquant", **kwargs})


def test_entry_point_and_spec() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="lmcache.serde")}
    assert eps["turboquant"] == "lmserde_turboquant.spec:TURBOQUANT_SPEC"
    spec = get_serde_spec("turboquant")
    assert spec is TURBOQUANT_SPEC
    assert spec.size_contract is SerdeSizeContract.EXACT and spec.lossy


def test_builds_from_upstream_kwargs() -> None:
    proc = _make(preset="turboquant_k3v4_nc", head_dim=64, block_size=32, max_workers=2)
    try:
        assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()
    finally:
        proc.close()


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"max_workers": 2.0}, "max_workers"), ({"head_dim": "128"}, "head_dim"),
    ({"skip_first_layers": "0"}, "skip_first_layers"), ({"block_size": 16.0}, "block_size"),
    ({"block_size": "1e3"}, "block_size"),
])
def test_numbers_of_another_type_are_refused(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=f"option '{name}' must be an integer"):
        _make(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"preset": "turboquant_k4v4"}, "Unsupported TurboQuant preset: 'turboquant_k4v4'"),
    ({"head_dim": 96}, "head_dim to be a power of two, got 96"),
    ({"head_dim": 4}, "head_dim must be between 8 and 1024"),
    ({"head_dim": 2048}, "head_dim must be between 8 and 1024"),
    ({"block_size": 0}, "'block_size' must be >= 1"),
    ({"skip_first_layers": -1}, "'skip_first_layers' must be >= 0"),
    ({"skip_last_layers": -2}, "'skip_last_layers' must be >= 0"),
    ({"backend": "cuda"}, "'backend' must be one of"),
    ({"max_workers": 0}, "'max_workers' must be >= 1"),
    ({"head_dim": 1.5}, "'head_dim' must be an integer"),
    ({"preset": 3}, "'preset' must be a string"),
    ({"presett": "tq4"}, "Did you mean 'preset'"),
])
def test_bad_options_are_rejected_at_creation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _make(**kwargs)


def test_config_validates_directly() -> None:
    with pytest.raises(ValueError, match="skipped layer counts must be non-negative"):
        TurboQuantConfig(skip_first_layers=-1)
    with pytest.raises(ValueError, match="Unsupported TurboQuant preset"):
        TurboQuantConfig(preset="nope")  # rejected on creation, not on first use
    with pytest.raises(ValueError, match="must be an integer"):
        TurboQuantConfig(head_dim=True)  # type: ignore[arg-type]
    cfg = TurboQuantConfig(preset="tq4")
    assert cfg.preset_spec.name == "tq4"


def test_native_backend_requires_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module.codec_native.NATIVE_CODEC, "_module", None)
    with pytest.raises(ValueError, match="native codec is not built"):
        _make(backend="native")
    _make(backend="auto").close()  # falls back to the torch codec


def test_the_former_option_name_implementation_is_still_accepted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="lmserde.options"):
        old = _make(implementation="torch")
    try:
        assert old.serializer.config.backend == "torch"  # type: ignore[attr-defined]
        assert "option 'implementation' is deprecated; use 'backend'" in caplog.text
        new = _make(backend="torch")
        assert old.get_config() == new.get_config()
        new.close()
    finally:
        old.close()
    with pytest.raises(ValueError, match="'implementation' must be one of|'backend' must be one"):
        _make(implementation="cuda")
    with pytest.raises(ValueError, match="give only 'backend'"):
        _make(implementation="torch", backend="auto")


def test_native_status_and_one_fallback_warning(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    codec_native = config_module.codec_native
    if codec_native.available():
        status = TURBOQUANT_SPEC.describe_native()
        assert status == {"backend": "native", "simd": codec_native.simd_isa(), "built": True}
    monkeypatch.setattr(codec_native.NATIVE_CODEC, "_module", None)
    monkeypatch.setattr(codec_native.NATIVE_CODEC, "_fallback_logged", False)
    status = TURBOQUANT_SPEC.describe_native()
    assert status is not None and status["backend"] == "torch" and status["built"] is False
    assert "not built" in status["reason"]
    with caplog.at_level("WARNING", logger="lmserde_turboquant"):
        for _ in range(3):
            _make().close()
    fallbacks = [r for r in caplog.records if "pure-torch codec" in r.getMessage()]
    assert len(fallbacks) == 1
