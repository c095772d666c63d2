"""``lmserde.NativeExtension``: the one loader of a plugin's optional compiled extension (import
once, the environment switch, the shared status vocabulary, one fallback log line)."""

from __future__ import annotations

import logging

import pytest
from lmserde import NativeExtension

LOG = logging.getLogger("test_native_extension")


def _math(**kwargs: str) -> NativeExtension:
    """A built extension: the standard library's compiled ``math`` module stands in."""
    return NativeExtension("math", distribution="lmserde-demo", simd=lambda m: "scalar", **kwargs)


def _missing(**kwargs: str) -> NativeExtension:
    return NativeExtension("lmserde_demo._not_built", distribution="lmserde-demo",
                           simd=lambda m: "avx2", **kwargs)


def test_a_built_extension_runs_natively() -> None:
    ext = _math()
    assert ext.built() and ext.available()
    assert ext.module is not None and ext.require() is ext.module
    assert ext.simd() == "scalar"
    assert ext.status() == {"backend": "native", "simd": "scalar", "built": True}


def test_a_missing_extension_is_the_fallback_with_its_reason() -> None:
    ext = _missing()
    assert not ext.built() and not ext.available() and ext.module is None
    assert ext.simd() is None
    status = ext.status()
    assert status["backend"] == "torch" and status["built"] is False and status["simd"] is None
    assert "lmserde_demo._not_built is not built (ModuleNotFoundError" in status["reason"]
    assert "reinstall lmserde-demo with a C compiler" in status["reason"]
    with pytest.raises(RuntimeError, match=r"lmserde_demo\._not_built is not built"):
        ext.require()
    assert NativeExtension("lmserde_demo._x", distribution="d", simd=str,
                           fallback="python").status()["backend"] == "python"


@pytest.mark.parametrize("value", ["0", "false", "No "])
def test_the_environment_switch_turns_the_native_path_off(monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    monkeypatch.setenv("LMSERDE_DEMO_NATIVE", value)
    ext = _math(switch_env="LMSERDE_DEMO_NATIVE", switch_setter="set_native_enabled")
    assert ext.built() and not ext.available()
    assert ext.status() == {"backend": "torch", "simd": "scalar", "built": True,
                            "reason": "disabled (LMSERDE_DEMO_NATIVE=0 or "
                                      "set_native_enabled(False))"}
    ext.set_enabled(True)
    assert ext.available() and ext.status()["backend"] == "native"


def test_the_switch_is_read_when_the_extension_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMSERDE_DEMO_NATIVE", "1")
    ext = _math(switch_env="LMSERDE_DEMO_NATIVE")
    monkeypatch.setenv("LMSERDE_DEMO_NATIVE", "0")
    assert ext.available()
    ext.set_enabled(False)
    assert ext.status()["reason"] == "disabled (LMSERDE_DEMO_NATIVE=0)"


def test_the_fallback_is_logged_once_per_extension(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOG.name):
        _math().log_fallback_once(LOG, "the demo serde runs its torch codec")  # native: silent
        missing = _missing()
        for _ in range(3):
            missing.log_fallback_once(LOG, "the demo serde runs its torch codec")
        disabled = _math()
        disabled.set_enabled(False)
        disabled.log_fallback_once(LOG, "the demo serde runs its torch codec")
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOG.name]
    assert len(records) == 2
    assert records[0][0] == logging.WARNING
    assert records[0][1].startswith("lmserde-demo: the demo serde runs its torch codec (the same "
                                    "bytes, several times slower): the native extension")
    assert records[1] == (logging.INFO, "lmserde-demo: the demo serde runs its torch codec (the "
                          "same bytes, several times slower): disabled (set_enabled(False))")
