"""The keyring file format: per-tenant root secrets with versions.

A keyring is a UTF-8 JSON file::

    {
      "lmserde_aesgcm_keyring": 1,
      "tenants": {
        "":      {"current": 1, "keys": {"1": "<base64>"}},
        "alice": {"current": 2, "keys": {"1": "<base64>", "2": "<base64>"}}
      }
    }

``tenants`` maps a tenant (a ``cache_salt``; ``""`` is the requests without one) to its
``current`` version (what new frames use) and its ``keys``: decimal version numbers in
``[0, 2**32 - 1]`` mapped to standard base64 of a root secret of at least 16 bytes. Older
versions stay listed so that frames written with them still decrypt. Version 0 is the version the
``hkdf`` provider writes: a keyring whose tenants hold the old master key as version 0 reads
everything that provider wrote. Error messages name the file, tenant and version but never print
key material.

A *wrapped keyring* has the same layout under the format member ``"lmserde_wrapped_keyring": 1``:
its entries are root secrets wrapped by a key management service (opaque bytes to this module,
unwrapped by the provider that reads it, e.g. ``lmserde-kms``). The editing functions
(:mod:`lmserde.tenant_keys.key_files`: forget a tenant, retire versions) work on both kinds and keep
the kind of the file; each provider reads only its own kind.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from lmserde.tenant_keys.errors import (
    KeyringError,
    RetiredKeyVersionError,
    UnknownKeyVersionError,
    UnknownTenantError,
)
from lmserde.tenant_keys.provider import MAX_KEY_VERSION
from lmserde.tenant_keys.secret_file import MIN_MASTER_KEY_BYTES

__all__ = ["KEYRING_FORMAT_VERSION", "KEYRING_FORMAT_FIELD", "WRAPPED_KEYRING_FORMAT_FIELD",
           "TenantKeys", "Keyring", "parse_keyring", "check_tenant_name"]

KEYRING_FORMAT_VERSION = 1
#: The format member of a keyring of plain root secrets.
KEYRING_FORMAT_FIELD = "lmserde_aesgcm_keyring"
#: The format member of a keyring whose entries are wrapped by a key management service.
WRAPPED_KEYRING_FORMAT_FIELD = "lmserde_wrapped_keyring"
_FORMAT_FIELDS = (KEYRING_FORMAT_FIELD, WRAPPED_KEYRING_FORMAT_FIELD)
_MAX_TENANT_LEN = 128
_FORBIDDEN_TENANT_CHARS = "@/\\\x00"


def check_tenant_name(tenant: str, *, where: str = "") -> None:
    """``KeyringError`` unless ``tenant`` is a possible ``cache_salt``."""
    if not isinstance(tenant, str):
        raise KeyringError(f"{where}tenant names must be strings, got {type(tenant).__name__}")
    if len(tenant) > _MAX_TENANT_LEN or any(c in tenant for c in _FORBIDDEN_TENANT_CHARS):
        raise KeyringError(
            f"{where}tenant {tenant!r} can never match a cache_salt (at most {_MAX_TENANT_LEN} "
            "characters, no '@', '/', '\\' or NUL)"
        )


@dataclass(frozen=True)
class TenantKeys:
    """One tenant's root secrets by version, and the version new frames use."""

    current: int
    secrets: Mapping[int, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "secrets", MappingProxyType(dict(self.secrets)))

    def __repr__(self) -> str:
        return f"TenantKeys(current={self.current}, versions={sorted(self.secrets)})"


@dataclass(frozen=True)
class Keyring:
    """An immutable keyring: tenant -> :class:`TenantKeys`; ``format_field`` says whether its
    entries are plain root secrets (:data:`KEYRING_FORMAT_FIELD`) or wrapped ones
    (:data:`WRAPPED_KEYRING_FORMAT_FIELD`). Every edit returns a copy of the same kind."""

    tenants: Mapping[str, TenantKeys] = field(default_factory=dict)
    format_field: str = KEYRING_FORMAT_FIELD

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))
        if self.format_field not in _FORMAT_FIELDS:
            raise KeyringError(f"unknown keyring kind {self.format_field!r}")

    def __repr__(self) -> str:
        return f"Keyring(tenants={len(self.tenants)})"

    @property
    def wrapped(self) -> bool:
        """Whether the entries are wrapped by a key management service (not plain secrets)."""
        return self.format_field == WRAPPED_KEYRING_FORMAT_FIELD

    def tenant(self, tenant: str) -> TenantKeys:
        """The keys of ``tenant``; ``UnknownTenantError`` if the keyring has none."""
        try:
            return self.tenants[tenant]
        except KeyError:
            raise UnknownTenantError(
                f"the keyring holds no key for tenant {tenant!r} (cache_salt); it knows "
                f"{len(self.tenants)} tenant(s). A new tenant gets one with `lmserde keygen "
                f"--keyring FILE --tenant {tenant!r}`. If the tenant was removed with `lmserde "
                "tenant forget`, its objects stay unreadable by design: a new key serves new "
                "stores only."
            ) from None

    def secret(self, tenant: str, version: int) -> bytes:
        """The root secret of ``tenant`` at ``version``; ``UnknownKeyVersionError`` if absent."""
        keys = self.tenant(tenant)
        try:
            return keys.secrets[version]
        except KeyError:
            known = ", ".join(str(v) for v in sorted(keys.secrets))
            if version < max(keys.secrets):
                raise RetiredKeyVersionError(
                    f"the keyring holds no key version {version} for tenant {tenant!r} (known "
                    f"versions: {known}): older than the versions it holds, so retired"
                ) from None
            raise UnknownKeyVersionError(
                f"the keyring holds no key version {version} for tenant {tenant!r} "
                f"(known versions: {known}); the frame was written with a key that has been "
                "removed or not yet distributed to this server"
            ) from None

    def with_new_version(self, tenant: str, secret: bytes, *, activate: bool = True) -> Keyring:
        """A copy with ``secret`` added as ``tenant``'s next version (made current if
        ``activate``; a new tenant's first version is always current)."""
        check_tenant_name(tenant)
        _check_secret(secret, where=f"tenant {tenant!r}: ")
        old = self.tenants.get(tenant)
        if old is None:
            updated = TenantKeys(current=1, secrets={1: bytes(secret)})
        else:
            version = max(old.secrets) + 1
            if version > MAX_KEY_VERSION:
                raise KeyringError(f"tenant {tenant!r} has run out of key versions")
            secrets = dict(old.secrets)
            secrets[version] = bytes(secret)
            updated = TenantKeys(current=version if activate else old.current, secrets=secrets)
        tenants = dict(self.tenants)
        tenants[tenant] = updated
        return replace(self, tenants=tenants)

    def with_current(self, tenant: str, version: int) -> Keyring:
        """A copy whose ``tenant`` writes new frames with the existing ``version``."""
        keys = self.tenant(tenant)
        self.secret(tenant, version)
        tenants = dict(self.tenants)
        tenants[tenant] = TenantKeys(current=version, secrets=keys.secrets)
        return replace(self, tenants=tenants)

    def without_tenant(self, tenant: str) -> Keyring:
        """A copy without any key of ``tenant`` (crypto-shredding: once no copy of the old
        keyring is left, nothing can decrypt the tenant's frames); ``UnknownTenantError`` if the
        keyring holds none."""
        self.tenant(tenant)
        return replace(self, tenants={n: k for n, k in self.tenants.items() if n != tenant})

    def without_versions(self, tenant: str, versions: Iterable[int]) -> Keyring:
        """A copy in which ``tenant`` no longer holds ``versions`` (retired: frames written with
        them stop decrypting). ``UnknownKeyVersionError`` for a version it does not hold,
        ``KeyringError`` for the current version (rotate first) or an empty selection."""
        keys = self.tenant(tenant)
        doomed = set(versions)
        if not doomed:
            raise KeyringError(f"tenant {tenant!r}: no key version selected to retire")
        for version in sorted(doomed):
            self.secret(tenant, version)
        if keys.current in doomed:
            raise KeyringError(
                f"tenant {tenant!r}: key version {keys.current} is the one new frames use; "
                "rotate (`lmserde keys rotate`) before retiring it, or forget the tenant"
            )
        kept = {v: s for v, s in keys.secrets.items() if v not in doomed}
        tenants = dict(self.tenants)
        tenants[tenant] = TenantKeys(current=keys.current, secrets=kept)
        return replace(self, tenants=tenants)

    def dumps(self) -> bytes:
        """The keyring as file contents (UTF-8 JSON)."""
        doc: dict[str, Any] = {
            self.format_field: KEYRING_FORMAT_VERSION,
            "tenants": {
                name: {
                    "current": keys.current,
                    "keys": {
                        str(v): base64.b64encode(keys.secrets[v]).decode("ascii")
                        for v in sorted(keys.secrets)
                    },
                }
                for name, keys in sorted(self.tenants.items())
            },
        }
        return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def _check_secret(secret: bytes, *, where: str) -> None:
    if len(secret) < MIN_MASTER_KEY_BYTES:
        raise KeyringError(
            f"{where}root secrets must be at least {MIN_MASTER_KEY_BYTES} bytes, "
            f"got {len(secret)}"
        )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise KeyringError(f"duplicate JSON member {name!r}")
        result[name] = value
    return result


#: The longest misplaced value an error message quotes: every key version fits (10 digits), no
#: root secret does (16 bytes and more are 24 base64 characters and more).
_QUOTED_MAX = 10


def _shown(value: Any) -> str:
    """``value`` for an error message about a misplaced one: quoted only when it is too short to
    be a root secret (a secret written where a version belongs must not reach a log)."""
    if isinstance(value, bool | int) or (isinstance(value, str) and len(value) <= _QUOTED_MAX):
        return repr(value)
    size = f" of {len(value)} characters" if isinstance(value, str) else ""
    return f"a {type(value).__name__}{size} (not shown: it may be key material)"


def _parse_version(text: Any, *, where: str) -> int:
    if not isinstance(text, str) or not text.isascii() or not text.isdigit():
        raise KeyringError(f"{where}key versions must be decimal strings, got {_shown(text)}")
    version = int(text)
    if not 0 <= version <= MAX_KEY_VERSION or str(version) != text:
        raise KeyringError(
            f"{where}key version {_shown(text)} must be a canonical integer in "
            f"[0, {MAX_KEY_VERSION}]"
        )
    return version


def _parse_tenant(name: str, entry: Any, *, where: str) -> TenantKeys:
    if not isinstance(entry, dict) or set(entry) != {"current", "keys"}:
        raise KeyringError(
            f"{where}each tenant must be an object with exactly 'current' and 'keys'"
        )
    keys = entry["keys"]
    if not isinstance(keys, dict) or not keys:
        raise KeyringError(f"{where}'keys' must be a non-empty object of version -> base64 secret")
    secrets: dict[int, bytes] = {}
    for text, encoded in keys.items():
        version = _parse_version(text, where=where)
        if not isinstance(encoded, str):
            raise KeyringError(f"{where}key version {version} must be a base64 string")
        try:
            secret = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise KeyringError(f"{where}key version {version} is not valid base64") from None
        _check_secret(secret, where=f"{where}key version {version}: ")
        secrets[version] = secret
    current = entry["current"]
    if isinstance(current, bool) or not isinstance(current, int) or current not in secrets:
        known = ", ".join(str(v) for v in sorted(secrets))
        raise KeyringError(
            f"{where}'current' must be one of the listed versions ({known}), got "
            f"{_shown(current)}"
        )
    return TenantKeys(current=current, secrets=secrets)


def parse_keyring(
    data: bytes, *, source: str = "keyring", formats: Iterable[str] = (KEYRING_FORMAT_FIELD,)
) -> Keyring:
    """Parse keyring file contents; ``KeyringError`` naming ``source`` for anything malformed.

    ``formats`` are the kinds accepted (default: plain keyrings only; pass
    :data:`WRAPPED_KEYRING_FORMAT_FIELD` for wrapped ones, both to edit either)."""
    accepted = tuple(formats)
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except KeyringError as exc:
        raise KeyringError(f"keyring {source}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        # The position is safe to report; the text around it could be a secret.
        pos = getattr(exc, "pos", None) or getattr(exc, "start", "?")
        raise KeyringError(f"keyring {source}: not UTF-8 JSON (error at byte/char {pos})") from None
    kind = next((f for f in accepted if isinstance(doc, dict) and f in doc), accepted[0])
    if not isinstance(doc, dict) or doc.get(kind) != KEYRING_FORMAT_VERSION:
        raise KeyringError(
            f"keyring {source}: expected a JSON object with "
            f"\"{kind}\": {KEYRING_FORMAT_VERSION}"
        )
    if set(doc) != {kind, "tenants"} or not isinstance(doc["tenants"], dict):
        raise KeyringError(
            f"keyring {source}: expected exactly the members '{kind}' and 'tenants' "
            "(an object of tenant -> keys)"
        )
    tenants: dict[str, TenantKeys] = {}
    for name, entry in doc["tenants"].items():
        where = f"keyring {source}: tenant {name!r}: "
        check_tenant_name(name, where=f"keyring {source}: ")
        tenants[name] = _parse_tenant(name, entry, where=where)
    return Keyring(tenants, format_field=kind)
