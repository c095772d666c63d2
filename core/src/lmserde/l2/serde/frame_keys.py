"""The frame key: where an authenticated frame's per-tenant MAC keys come from.

An adapter option names the root key material (``frame_key_path``: one key file, read like the
aesgcm serde's ``master_key_path``; or ``frame_keyring_path``: a keyring file in the aesgcm
keyring format, so ``lmserde keygen --keyring``, ``keys rotate`` and ``tenant forget`` edit it).
The providers are :mod:`lmserde.tenant_keys`'s. Each tenant (an object key's ``cache_salt``) gets
its own MAC key at each key version::

    mac_key = HKDF-SHA256(ikm = root secret of (tenant, version), salt = none,
                          info = b"lmserde frame mac v1" || 0x00 || UTF-8(tenant), length = 32)

(domain-separated from the aesgcm serde's AES keys, whose ``info`` starts otherwise). With one
key file every tenant still gets a distinct key, but any holder of the file can derive all of
them; a keyring gives each tenant its own root secret.

A keyring is watched (:class:`~lmserde.tenant_keys.KeyringWatch`): running processes re-read it
within ``frame_keyring_reload_interval_s`` seconds (default 5; 0 reads it once) of a change
(``keys rotate``, ``keys retire``, ``tenant forget``). A frame whose (tenant, key version) the
ring no longer holds, a forgotten tenant or a retired version, is refused as ``unkeyed``
(:attr:`KeyNotHeld.withdrawn`: ``lmserde scrub --delete-unkeyed`` reclaims it, for any serde);
a version newer than every one held (not yet distributed) stays ``foreign``.

The root secret is asked of the provider for every frame (a dictionary lookup) and only the
derivation is cached, keyed by the secret itself: a key removed from the provider (a keyring
reloaded after ``tenant forget``) stops verifying at once, however long the cache lives. The
cache is emptied whenever the provider's ``key_generation()`` changes (the provider contract), so
a running process holds no forgotten or retired tenant's secret, nor a key derived from it,
after its keyring reloads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lmserde.tenant_keys.errors import UnknownKeyVersionError, UnknownTenantError
from lmserde.tenant_keys.keyring_provider import KeyringKeyProvider
from lmserde.tenant_keys.keyring_watch import DEFAULT_RELOAD_INTERVAL_S
from lmserde.tenant_keys.master_key_provider import MasterKeyProvider
from lmserde.tenant_keys.provider import KeyProvider, key_withdrawn

__all__ = ["FRAME_KEY_OPTIONS", "MAC_KEY_INFO", "FrameKeyOptions", "FrameKeys",
           "KeyNotHeld", "parse_frame_key_options"]

MAC_KEY_INFO = b"lmserde frame mac v1\x00"
_MAC_KEY_BYTES = 32
_CACHE_LIMIT = 4096

#: Adapter-spec keys of the frame key (read by the serde wrapper, never passed to the adapter).
FRAME_KEY_OPTIONS = ("frame_key_path", "frame_keyring_path", "hide_names",
                     "frame_keyring_reload_interval_s")
#: The largest ``frame_keyring_reload_interval_s`` (one day, as aesgcm's option).
_MAX_RELOAD_INTERVAL_S = 86400.0


class KeyNotHeld(LookupError):
    """The provider holds no key for this (tenant, key version): someone else's object.
    ``withdrawn``: the key material is not, or no longer, in the provider (a forgotten or never
    given tenant, a retired version: :func:`~lmserde.tenant_keys.key_withdrawn`), as opposed to
    a version newer than every one held."""

    def __init__(self, message: str, *, withdrawn: bool = False) -> None:
        super().__init__(message)
        self.withdrawn = withdrawn


@dataclass(frozen=True)
class FrameKeyOptions:
    """The parsed frame-key options of one adapter spec: exactly one of the two paths."""

    key_path: str | None = None
    keyring_path: str | None = None
    #: Store objects under keyed hashes of their keys (:mod:`lmserde.l2.serde.hidden_names`).
    hide_names: bool = False
    #: Seconds between looks at the keyring file (0: read once); a keyring only.
    keyring_reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S

    def open(self) -> FrameKeys:
        """Read the key file or keyring now (a keyring then watched every
        :attr:`keyring_reload_interval_s`); ``KeyFileError``/``KeyringError`` (``ValueError``s
        naming the option and the file, never the key) when it is missing or unusable."""
        try:
            if self.keyring_path is not None:
                provider: KeyProvider = KeyringKeyProvider.from_file(
                    self.keyring_path, reload_interval_s=self.keyring_reload_interval_s)
                return FrameKeys(provider, "keyring")
            assert self.key_path is not None
            return FrameKeys(MasterKeyProvider.from_file(self.key_path), "key file")
        except ValueError as exc:
            option = "frame_keyring_path" if self.keyring_path is not None else "frame_key_path"
            raise type(exc)(f"option '{option}': {exc}") from None


def parse_frame_key_options(spec: Mapping[str, Any]) -> FrameKeyOptions | None:
    """The frame-key options of an adapter spec (``None`` when it names none). Strict: each is a
    non-empty string path, and at most one of them is given (``ValueError`` naming the option);
    ``frame_keyring_reload_interval_s`` is a number of seconds in [0, 86400] and needs
    ``frame_keyring_path``."""
    hide_names = spec.get("hide_names", False)
    if not isinstance(hide_names, bool):
        raise ValueError(f"option 'hide_names' must be true or false, got {hide_names!r}")
    given = {name: spec[name] for name in FRAME_KEY_OPTIONS[:2] if name in spec}
    interval = _reload_interval(spec, "frame_keyring_path" in given)
    if hide_names and "frame_key_path" not in given:
        raise ValueError("option 'hide_names' needs 'frame_key_path' (a frame key file): the "
                         "real key travels in the authenticated frame, and names are hashed "
                         "with a key derived from that file")
    for name, value in given.items():
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
            raise ValueError(f"option '{name}' must be a path to a key file (a non-empty string), "
                             f"got {value!r}")
    if len(given) > 1:
        raise ValueError("options 'frame_key_path' and 'frame_keyring_path' exclude each other: "
                         "name one key file or one keyring")
    if not given:
        return None
    key_path = given.get("frame_key_path")
    keyring_path = given.get("frame_keyring_path")
    return FrameKeyOptions(None if key_path is None else os.fspath(key_path),
                           None if keyring_path is None else os.fspath(keyring_path),
                           hide_names, interval)


def _reload_interval(spec: Mapping[str, Any], keyring: bool) -> float:
    """The spec's ``frame_keyring_reload_interval_s`` (default 5), checked."""
    name = "frame_keyring_reload_interval_s"
    if name not in spec:
        return DEFAULT_RELOAD_INTERVAL_S
    if not keyring:
        raise ValueError(f"option '{name}' only applies with 'frame_keyring_path' (a key file "
                         "is read once)")
    value = spec[name]
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 <= value <= _MAX_RELOAD_INTERVAL_S):
        raise ValueError(f"option '{name}' must be a number of seconds in [0, "
                         f"{_MAX_RELOAD_INTERVAL_S:.0f}], got {value!r}")
    return float(value)


class FrameKeys:
    """Per-tenant MAC keys from a :class:`~lmserde.tenant_keys.KeyProvider` (see the module
    docstring). Thread-safe. ``kind`` says in reports where the keys come from."""

    def __init__(self, provider: KeyProvider, kind: str) -> None:
        self._provider = provider
        self.kind = kind
        self._derived: dict[tuple[str, int, bytes], bytes] = {}
        self._generation = provider.key_generation()
        self._lock = threading.Lock()

    @property
    def provider(self) -> KeyProvider:
        return self._provider

    def current_version(self, tenant: str) -> int:
        """The key version new frames of ``tenant`` use; :class:`KeyNotHeld` for a tenant the
        provider has no key for."""
        try:
            return self._provider.current_version(tenant)
        except (UnknownTenantError, UnknownKeyVersionError) as exc:
            raise KeyNotHeld(str(exc), withdrawn=key_withdrawn(exc)) from None

    def mac_key(self, tenant: str, version: int) -> bytes:
        """The 32-byte MAC key of ``tenant`` at ``version``; :class:`KeyNotHeld` when the provider
        does not hold that version (``withdrawn`` when it was forgotten or retired; any other
        provider failure propagates)."""
        generation = self._provider.key_generation()
        if generation != self._generation:  # keys may have been withdrawn: keep none of them
            with self._lock:
                self._derived.clear()
                self._generation = generation
        try:
            root = self._provider.root_secret(tenant, version)
        except (UnknownTenantError, UnknownKeyVersionError) as exc:
            raise KeyNotHeld(str(exc), withdrawn=key_withdrawn(exc)) from None
        cache_key = (tenant, version, bytes(root))
        derived = self._derived.get(cache_key)
        if derived is None:
            derived = HKDF(algorithm=hashes.SHA256(), length=_MAC_KEY_BYTES, salt=None,
                           info=MAC_KEY_INFO + tenant.encode("utf-8", "surrogatepass"),
                           ).derive(root)
            with self._lock:
                if len(self._derived) >= _CACHE_LIMIT:
                    self._derived.clear()
                self._derived[cache_key] = derived
        return derived

    def names_key(self) -> bytes:
        """The tenant-independent key hidden names are hashed with
        (:func:`~lmserde.l2.serde.hidden_names.names_key_from_root` of the key file).
        ``ValueError`` for a keyring, which has no tenant-independent secret."""
        if not isinstance(self._provider, MasterKeyProvider):
            raise ValueError("option 'hide_names' needs 'frame_key_path' (one key file): a "
                             "keyring has no tenant-independent secret to hash names with")
        from lmserde.l2.serde.hidden_names import names_key_from_root

        return names_key_from_root(self._provider.root_secret("", 0))

    def describe(self) -> str:
        """Where the keys come from, never the keys (for status reports and logs)."""
        return f"{self.kind}: {self._provider.describe()}"

    def __repr__(self) -> str:
        return f"<FrameKeys {self.describe()}>"
