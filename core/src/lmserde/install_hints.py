"""Which distribution of this repository provides a plugin name, and how to install it.

One table for every kind of plugin name — serde types (``lmcache.serde``), L2 adapter types
(``lmcache.l2_adapter``) and CLI commands that hook plugins add — so that a config or a command
naming a plugin that is not installed says which distribution to install, in one wording.
"""

from __future__ import annotations

__all__ = [
    "SERDE_GROUP",
    "L2_ADAPTER_GROUP",
    "CLI_COMMANDS",
    "KNOWN_PROVIDERS",
    "providing_distribution",
    "install_hint",
]

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
    return (f"'{name}' is provided by {dist}. Install it with: pip install --find-links DIR {dist} "
            "(DIR: wheels built by `nox -s build` in the lmserde repository), or pip install "
            "./plugins/<dir> from a checkout")
