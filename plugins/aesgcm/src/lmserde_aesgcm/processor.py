"""The aesgcm processor: the async processor whose config identity names its key for frame v1.

A version-1 frame (LMCache's) names no key, so the stored-object frame could not tell a host
with another master key from one with the same: the other host would decrypt, fail, and call the
object damaged. This processor therefore adds ``"key_id"`` (``CipherCache.config_key_id``: a
one-way fingerprint of the provider's current keys) to the options of the config identity the
registry attaches, when it writes version-1 frames and the provider can state its keys. Two
hosts with the same key material get the same identity wherever their key files live; a host
with other keys sees another config, which the stored-object frame refuses before any decrypt.
Versions 2 and 3 name their key version (and 3 its key id) in every frame and are read whatever
the config says, so their identity carries no key id (a keyring rotation keeps every object).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmserde import AsyncSerdeProcessor

from lmserde_aesgcm.serde import AesGcmDeserializer, AesGcmSerializer

__all__ = ["KEY_ID_OPTION", "AesGcmProcessor"]

#: The name of the config identity's option that holds the version-1 key id.
KEY_ID_OPTION = "key_id"


class AesGcmProcessor(AsyncSerdeProcessor):
    """An :class:`lmserde.AsyncSerdeProcessor` over an aesgcm pair whose :meth:`set_config`
    adds ``key_id`` (when not ``None``) to the identity options it is given."""

    def __init__(
        self,
        serializer: AesGcmSerializer,
        deserializer: AesGcmDeserializer,
        max_workers: int = 1,
        *,
        key_id: str | None,
        serde_type: str = "aesgcm",
    ) -> None:
        super().__init__(serializer, deserializer, max_workers, serde_type=serde_type)
        self._key_id = key_id

    @property
    def key_id(self) -> str | None:
        """The key id the config identity carries (``None``: none, frame version 2 or 3, or a
        provider that cannot state its keys)."""
        return self._key_id

    def set_config(self, config: Mapping[str, Any]) -> None:
        if self._key_id is not None:
            options = dict(config.get("options") or {})
            options[KEY_ID_OPTION] = self._key_id
            config = {**config, "options": dict(sorted(options.items()))}
        super().set_config(config)
