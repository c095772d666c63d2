"""Which distribution of this repository provides a plugin name, and how to install it.

One table for every kind of plugin name — serde types (``lmcache.serde``), L2 adapter types
(``lmcache.l2_adapter``) and CLI commands that hook plugins add — so that a config or a command
naming a plugin that is not installed says which distribution to install, in one wording.

The command is the README's: when the running core comes from a checkout of this repository
(an editable or ``pip install ./core`` install, or ``core/src`` on ``PYTHONPATH``) it installs
the plugin's directory of that checkout, ``pip install -c constraints.txt ./plugins/<dir>``
(relative when run from the checkout's root, absolute paths otherwise); for a core installed
from wheels it is ``pip install -c constraints.txt --find-links DIR <distribution>``.
``-c constraints.txt`` is always there: it keeps pip from resolving a CUDA build of torch.
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = [
    "SERDE_GROUP",
    "L2_ADAPTER_GROUP",
    "CLI_COMMANDS",
    "KNOWN_PROVIDERS",
    "providing_distribution",
    "install_hint",
    "install_command",
    "checkout_root",
    "CONSTRAINTS_FILE",
]

#: The pins file at the root of this repository (``-c`` of every install command).
CONSTRAINTS_FILE = "constraints.txt"
#: What the hint says to run for a core installed from wheels (``DIR`` is explained after it).
_WHEELS_NOTE = ("(DIR: the wheels `nox -s build` writes to dist/ in the lmserde repository; "
                f"{CONSTRAINTS_FILE}: the one at the root of that repository, which pins the CPU "
                "build of torch)")

#: Entry-point group of serde specs.
SERDE_GROUP = "lmcache.serde"
#: Entry-point group of L2 adapter specs.
L2_ADAPTER_GROUP = "lmcache.l2_adapter"
#: Not an entry-point group: the ``lmserde`` subcommands hook plugins of this repository add.
CLI_COMMANDS = "lmserde cli command"

#: group -> plugin name -> the distribution of this repository that provides it.
KNOWN_PROVIDERS: dict[str, dict[str, str]] = {
    SERDE_GROUP: {
        "fp8": "lmserde-fp8",
        "aesgcm": "lmserde-aesgcm",
        "turboquant": "lmserde-turboquant",
        "asym_k16_v8": "lmserde-asym-k16-v8",
        "asym_k16_v8_v_only": "lmserde-asym-k16-v8",
        "zstd": "lmserde-zstd",
    },
    L2_ADAPTER_GROUP: {
        "redis": "lmserde-redis",
        "s3": "lmserde-s3",
    },
    CLI_COMMANDS: {
        "keygen": "lmserde-aesgcm",
        "kms": "lmserde-kms",
    },
}


def providing_distribution(group: str, name: str) -> str | None:
    """The distribution of this repository that provides ``name`` in ``group`` (``None``: none)."""
    return KNOWN_PROVIDERS.get(group, {}).get(name)


def install_hint(group: str, name: str) -> str:
    """A sentence telling how to install the provider of ``name`` (``""`` when none is known)."""
    dist = providing_distribution(group, name)
    if dist is None:
        return ""
    command = install_command(dist, checkout_root())
    return f"'{name}' is provided by {dist}. Install it with: {command}"


def install_command(dist: str, checkout: Path | None, *, cwd: Path | None = None) -> str:
    """The shell command that installs ``dist``, a distribution of this repository.

    ``checkout``: the root of the checkout to install from (:func:`checkout_root`), ``None`` for
    the wheels form (also used when the checkout has no directory for ``dist``). Paths are
    relative when ``cwd`` (default: the current directory) is the checkout root.
    """
    plugin_dir = None if checkout is None else _plugin_dir(checkout, dist)
    if checkout is None or plugin_dir is None:
        return f"pip install -c {CONSTRAINTS_FILE} --find-links DIR {dist} {_WHEELS_NOTE}"
    try:
        here: Path | None = (cwd or Path.cwd()).resolve()
    except OSError:  # the current directory was removed
        here = None
    if here == checkout.resolve():
        return (f"pip install -c {CONSTRAINTS_FILE} "
                f"./{plugin_dir.relative_to(checkout).as_posix()}")
    return (f"pip install -c {shlex.quote(str(checkout / CONSTRAINTS_FILE))} "
            f"{shlex.quote(str(plugin_dir))}")


def checkout_root() -> Path | None:
    """The root of the lmserde checkout the running core comes from, or ``None`` (installed
    from wheels, or the checkout is gone)."""
    package_dir = Path(__file__).resolve().parent
    try:
        direct_url = metadata.distribution("lmserde").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct_url = None
    return _checkout_of(package_dir, direct_url)


def _checkout_of(package_dir: Path, direct_url: str | None) -> Path | None:
    """The checkout root given where the ``lmserde`` package is and the PEP 610
    ``direct_url.json`` of its distribution (``None``: none)."""
    source = package_dir.parents[2] if len(package_dir.parents) > 2 else None
    if source is not None and package_dir.parent.name == "src" and _is_checkout(source):
        return source  # running from core/src of a checkout (editable, or on PYTHONPATH)
    core_dir = _local_dir(direct_url)
    if core_dir is not None and _is_checkout(core_dir.parent):
        return core_dir.parent  # pip install ./core from a checkout that is still there
    return None


def _local_dir(direct_url: str | None) -> Path | None:
    """The local directory a ``direct_url.json`` names (``None``: an archive, a VCS URL, an
    index install or unreadable text)."""
    if not direct_url:
        return None
    try:
        data = json.loads(direct_url)
    except ValueError:
        return None
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str) or "dir_info" not in data:
        return None
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def _is_checkout(root: Path) -> bool:
    return ((root / CONSTRAINTS_FILE).is_file() and (root / "core" / "pyproject.toml").is_file()
            and (root / "plugins").is_dir())


def _plugin_dir(root: Path, dist: str) -> Path | None:
    """``plugins/<dir>`` of ``dist`` in the checkout (``lmserde-asym-k16-v8`` ->
    ``plugins/asym_k16_v8``), ``None`` when the checkout has no such directory."""
    name = dist.removeprefix("lmserde-").replace("-", "_")
    candidate = root / "plugins" / name
    return candidate if (candidate / "pyproject.toml").is_file() else None
