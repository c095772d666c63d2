"""Native-code status of a serde (``SerdeSpec.native_status``) in ``lmserde info`` and
``lmserde plugins --json``, and deprecated option names (``SerdeOption.deprecated_names``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from lmserde import SerdeOption, SerdeSpec, register_serde_factory
from lmserde.cli.main import main
from lmserde.identity import IDENTITY_SPEC
from lmserde.options import validate_options
from lmserde.registry import list_serdes, unregister_serde_factory


def _status() -> dict[str, Any]:
    return {"backend": "native", "simd": "avx2", "built": True}


def _broken_status() -> dict[str, Any]:
    raise SystemExit("plugin bug")


@pytest.fixture
def native_serdes() -> Iterator[None]:
    for name, fn in (("t_native", _status), ("t_native_broken", _broken_status)):
        register_serde_factory(name, SerdeSpec(pair_factory=IDENTITY_SPEC.pair_factory,
                                               description="test", native_status=fn))
    yield
    unregister_serde_factory("t_native")
    unregister_serde_factory("t_native_broken")


def test_describe_native_is_contained() -> None:
    assert IDENTITY_SPEC.describe_native() is None  # no native code
    assert SerdeSpec(pair_factory=IDENTITY_SPEC.pair_factory, native_status=_status).describe_native() == \
        _status()
    broken = SerdeSpec(pair_factory=IDENTITY_SPEC.pair_factory, native_status=_broken_status)
    assert broken.describe_native() == {"error": "SystemExit: plugin bug"}


def test_info_and_plugins_report_native_status(native_serdes: None,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "t_native", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["native"] == _status()
    assert main(["info", "t_native"]) == 0
    assert "native code: backend native, simd avx2" in capsys.readouterr().out
    assert main(["info", "t_native_broken"]) == 0
    assert "native code: status unknown (SystemExit: plugin bug)" in capsys.readouterr().out
    assert main(["info", "identity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["native"] is None
    assert main(["plugins", "--json"]) == 0
    serdes = {s["name"]: s for s in json.loads(capsys.readouterr().out)["serdes"]}
    assert serdes["t_native"]["native"] == _status()
    assert serdes["identity"]["native"] is None  # not loaded: metadata only
    by_name = {i.name: i for i in list_serdes(load=True)}
    assert by_name["identity"].native is None


OPTIONS = (SerdeOption("backend", str, "auto", choices=("auto", "native", "torch"),
                       deprecated_names=("implementation",)),)


def test_a_deprecated_option_name_is_renamed_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="lmserde.options"):
        for _ in range(3):
            assert validate_options("t_dep", OPTIONS, {"implementation": "torch"}) == \
                {"backend": "torch"}
    warnings = [r for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warnings) == 1
    assert "option 'implementation' is deprecated; use 'backend'" in warnings[0].getMessage()
    assert validate_options("t_dep", OPTIONS, {"backend": "native"}) == {"backend": "native"}
    with pytest.raises(ValueError, match="must be one of"):
        validate_options("t_dep", OPTIONS, {"implementation": "cuda"})
    with pytest.raises(ValueError, match="give only 'backend'"):
        validate_options("t_dep", OPTIONS, {"implementation": "torch", "backend": "torch"})


def test_core_checksum_kernel_status_in_plugins_and_info(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    import lmserde

    assert main(["plugins", "--json"]) == 0
    core = json.loads(capsys.readouterr().out)["core"]
    assert core["version"] == lmserde.__version__
    kernel = core["checksum_kernel"]
    if lmserde.checksum_kernel() is None:  # installed without a compiler
        assert kernel["backend"] == "python" and kernel["reason"]
    else:
        assert kernel == {"name": "stored-object checksum kernel", "backend": "native",
                          "simd": lmserde.checksum_kernel()}
    assert main(["plugins"]) == 0
    assert capsys.readouterr().out.startswith(f"Core: lmserde {lmserde.__version__}; ")
    assert main(["info", "identity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["core_checksum_kernel"] == kernel
    assert main(["info", "identity"]) == 0
    assert "core's stored-object checksum kernel: backend " in capsys.readouterr().out


def test_core_checksum_kernel_missing_is_the_python_fallback(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from lmserde import core_kernel

    monkeypatch.setattr(core_kernel, "CORE_KERNEL_MODULE", "lmserde._no_such_kernel")
    status = core_kernel.describe_core_kernel()
    assert status["backend"] == "python"
    assert "lmserde._no_such_kernel is not available (ModuleNotFoundError" in str(status["reason"])
