"""The pluggy hook through which other plugins provide key providers by name.

A hook plugin (entry-point group ``lmserde.hooks``) implements::

    from lmserde import hookimpl

    @hookimpl
    def lmserde_aesgcm_key_provider(name, options):
        if name != "vault":
            return None
        return VaultKeyProvider(**options)      # a lmserde_aesgcm.KeyProvider

    @hookimpl
    def lmserde_aesgcm_key_provider_names():
        return ["vault"]

and a config selects it with ``key_provider: vault`` and ``key_provider_options: {...}``. The
built-in names ``hkdf`` and ``keyring`` cannot be overridden.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pluggy
from lmserde import call_hookimpls, get_plugin_manager, hookspec
from lmserde.tenant_keys import KeyProvider

from lmserde_aesgcm.errors import KeyProviderError

__all__ = [
    "BUILTIN_PROVIDERS",
    "KeyProviderHookSpecs",
    "key_provider_plugin_manager",
    "provider_names",
    "resolve_key_provider",
]

BUILTIN_PROVIDERS = ("hkdf", "keyring")

_log = logging.getLogger("lmserde_aesgcm")
_lock = threading.Lock()


class KeyProviderHookSpecs:
    """Hooks the aesgcm serde calls."""

    @hookspec(firstresult=True)
    def lmserde_aesgcm_key_provider(
        self, name: str, options: Mapping[str, Any]
    ) -> KeyProvider | None:
        """Return a :class:`~lmserde_aesgcm.KeyProvider` for provider ``name`` built from
        ``options`` (the config's ``key_provider_options``), or ``None`` if ``name`` is not
        yours. Raise ``ValueError`` for bad options. The first non-``None`` answer wins."""

    @hookspec
    def lmserde_aesgcm_key_provider_names(self) -> list[str]:
        """The provider names this plugin answers to (listed in error messages)."""


def _spec_argnames(name: str) -> set[str]:
    params = inspect.signature(getattr(KeyProviderHookSpecs, name)).parameters
    return {p for p in params if p != "self"}


def key_provider_plugin_manager() -> pluggy.PluginManager:
    """The core's plugin manager, with this plugin's hookspecs added (once per manager).

    A hook plugin whose implementation takes arguments the spec does not offer is unregistered
    with a warning instead of breaking the serde.
    """
    pm = get_plugin_manager()
    with _lock:
        hook_names = ("lmserde_aesgcm_key_provider", "lmserde_aesgcm_key_provider_names")
        callers = [getattr(pm.hook, n, None) for n in hook_names]
        if all(c is not None and c.spec is not None for c in callers):
            return pm
        for name, caller in zip(hook_names, callers):
            if caller is None:
                continue
            allowed = _spec_argnames(name)
            for impl in caller.get_hookimpls():
                extra = set(impl.argnames) - allowed
                if extra:
                    _log.warning(
                        "hook plugin %r implements %s with unknown argument(s) %s; ignored",
                        impl.plugin_name, name, ", ".join(sorted(extra)),
                    )
                    pm.unregister(impl.plugin)
        pm.add_hookspecs(KeyProviderHookSpecs)
    return pm


def provider_names() -> list[str]:
    """Built-in provider names, then those hook plugins announce (sorted, unique).

    A plugin whose ``lmserde_aesgcm_key_provider_names`` raises (anything) is left out.
    """
    key_provider_plugin_manager()
    announced: set[str] = set()
    for result in call_hookimpls("lmserde_aesgcm_key_provider_names"):
        if result.error is None and result.value:
            try:
                announced.update(str(n) for n in result.value)
            except Exception:
                _log.warning("hook plugin %r announced key providers that are not a list of "
                             "names; ignored", result.plugin_name)
    return [*BUILTIN_PROVIDERS, *sorted(announced - set(BUILTIN_PROVIDERS))]


def resolve_key_provider(name: str, options: Mapping[str, Any]) -> KeyProvider:
    """The key provider a hook plugin builds for ``name``; ``KeyProviderError`` if none does.

    Each plugin's implementation is called separately (most recently registered first) until one
    returns a provider. One that raises anything (``SystemExit`` included) is logged naming it
    and the others are still asked; if none answers, the error names what the raising ones
    raised (a ``ValueError`` is reported as bad options).
    """
    key_provider_plugin_manager()
    results = call_hookimpls("lmserde_aesgcm_key_provider", firstresult=True, name=name,
                             options=dict(options))
    provider = next((r.value for r in results if r.error is None and r.value is not None), None)
    if provider is None:
        failures = [r for r in results if r.error is not None]
        if failures:
            first = failures[0]
            if isinstance(first.error, ValueError):
                raise KeyProviderError(f"key provider '{name}': {first.error}") from first.error
            raise KeyProviderError(
                f"key provider '{name}' failed to initialise in hook plugin "
                f"{first.plugin_name!r}: {type(first.error).__name__}: {first.error}"
            ) from first.error
        known = ", ".join(provider_names())
        raise KeyProviderError(
            f"unknown key_provider '{name}'. Available: {known}. A third-party provider comes "
            "from a hook plugin (entry-point group 'lmserde.hooks') implementing "
            "lmserde_aesgcm_key_provider."
        )
    if not isinstance(provider, KeyProvider):
        raise KeyProviderError(
            f"key provider '{name}': the hook returned {type(provider).__name__}, which is not a "
            "lmserde_aesgcm.KeyProvider"
        )
    return provider
