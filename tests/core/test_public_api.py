"""The public ``lmserde`` namespace: one lazily loaded export table, and ``python -m lmserde``."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import lmserde
import pytest

STUB = Path(lmserde.__file__).with_name("__init__.pyi")


def _stub_exports() -> dict[str, str]:
    """Name -> module of every ``from .module import name as name`` line of the stub."""
    table: dict[str, str] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 and node.module, ast.unparse(node)
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name}: a stub re-export is `X as X`"
                table[alias.name] = f"lmserde.{node.module}"
    return table


def test_the_stub_is_the_export_table() -> None:
    table = _stub_exports()
    assert len(table) > 40
    assert sorted(lmserde.__all__) == sorted(table)
    assert sorted(dir(lmserde)) == sorted(table)


@pytest.mark.parametrize("name", sorted(_stub_exports()))
def test_every_exported_name_resolves_to_its_module(name: str) -> None:
    module = _stub_exports()[name]
    value = getattr(lmserde, name)
    assert value is getattr(sys.modules[module], name)


#: Every package of core that exports names: each does it the same way (``lazy_loader`` reading
#: its ``__init__.pyi``).
PACKAGES = ["lmserde.l1", "lmserde.l2", "lmserde.bench", "lmserde.lmcache", "lmserde.testing",
            "lmserde.tenant_keys", "lmserde.adaptive"]
CORE = Path(lmserde.__file__).parent


def _package_stub(package: str) -> dict[str, str]:
    init = CORE.joinpath(*package.split(".")[1:], "__init__.pyi")
    table: dict[str, str] = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 and node.module, ast.unparse(node)
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name}: a stub re-export is `X as X`"
                table[alias.name] = f"{package}.{node.module}"
    return table


def _exports_something(init: Path) -> bool:
    """Whether an ``__init__.py`` does more than carry a docstring (and the version import)."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.module in ("__future__", "lmserde._version"):
            continue
        return True
    return False


def test_every_package_that_exports_names_uses_the_one_mechanism() -> None:
    exporting = set()
    for init in CORE.rglob("__init__.py"):
        package = ".".join(("lmserde", *init.parent.relative_to(CORE).parts))
        if _exports_something(init):
            exporting.add(package)
            assert "lazy_loader.attach_stub(__name__, __file__)" in init.read_text(), package
            assert init.with_suffix(".pyi").is_file(), package
    assert exporting == {"lmserde", *PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_a_package_stub_imports(package: str) -> None:
    names = sorted(_package_stub(package))
    code = (f"import importlib; p = importlib.import_module({package!r}); names = {names!r}; "
            "missing = [n for n in names if not hasattr(p, n)]; "
            "assert not missing, missing; "
            "assert sorted(p.__all__) == names == sorted(dir(p)), (p.__all__, names)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)  # a fresh interpreter: no name preloaded
    assert result.returncode == 0, result.stderr
    for name, module in _package_stub(package).items():
        assert getattr(importlib.import_module(package), name) is \
            getattr(importlib.import_module(module), name), name


def test_l2_keeps_every_name_it_exported_eagerly() -> None:
    """Every name l2 exported when its ``__init__`` imported them eagerly is still exported."""
    import lmserde.l2 as l2
    assert set(_EAGER_L2_NAMES) <= set(l2.__all__), set(_EAGER_L2_NAMES) - set(l2.__all__)


#: ``lmserde.l2.__all__`` before its names moved into ``__init__.pyi``.
_EAGER_L2_NAMES = (
    "AdapterTaskQueues", "AdapterUsage", "Bitmap", "ChainStage", "DeferredHead",
    "FRAME_HEADER_BYTES", "FSL2Adapter", "FaultInjectingL2Adapter", "FaultPlan", "FrameRejected",
    "HeadLastAdapter", "InjectedFaultError", "KeyPins", "L1_WRITE_TAG", "L2AdapterConfig",
    "L2AdapterFactory", "L2AdapterInfo", "L2AdapterInterface", "L2AdapterSpec", "L2Listener",
    "L2StoreResult", "L2TaskId", "L2_ADAPTER_GROUP", "LatencySummary", "MemoryL2Adapter",
    "ObjectFramer", "QueuedResults", "REJECT_REASONS", "ReplacingStoreAdapter",
    "SPLIT_TIER_K_TAG", "ScrubReport", "SerdeChainProcessor", "SerdeL2AdapterWrapper",
    "SplitTierConfigError", "SplitTierL2Adapter", "SplitTierManifest", "SplitTierState",
    "StoragePlacementMode", "WrapperMetrics", "adapter_writes_head_last", "check_split_tier_specs",
    "create_l2_adapter", "create_serde_chain", "create_serde_for_config",
    "create_split_tier_adapter", "derive_component_key", "derive_storage_placement_mode",
    "enable_replacing_stores", "get_l2_adapter_spec", "get_registered_l2_adapter_types",
    "key_file_name", "list_l2_adapters", "load_sync", "lookup_sync", "parse_component_key",
    "parse_l2_adapter_spec", "parse_serde_config", "register_l2_adapter_type",
    "rescan_l2_adapter_plugins", "scrub_adapter", "store_sync", "unregister_l2_adapter_type",
    "wait_for_load", "wait_for_lookup", "wait_for_store",
)


def test_importing_the_packages_does_not_import_torch() -> None:
    code = ("import sys; from lmserde.bench import BUILTIN_MODELS, DEFAULT_TIERS; "
            "import lmserde.l1, lmserde.l2, lmserde.lmcache, lmserde.testing; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        lmserde.NoSuchThing  # noqa: B018


def test_import_lmserde_does_not_import_torch() -> None:
    code = ("import sys, lmserde; lmserde.ObjectKey; lmserde.hookimpl; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_python_dash_m_lmserde_runs_the_cli() -> None:
    version = subprocess.run([sys.executable, "-m", "lmserde", "--version"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"lmserde {lmserde.__version__}"
    listing = subprocess.run([sys.executable, "-m", "lmserde", "plugins"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert listing.returncode == 0, listing.stderr
    assert "identity" in listing.stdout
    usage = subprocess.run([sys.executable, "-m", "lmserde", "no-such-command"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert usage.returncode == 2
