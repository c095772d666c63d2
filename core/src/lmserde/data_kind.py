"""What a serde consumes and produces, and the config-time check that a chain's stages compose."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

__all__ = ["DataKind", "ALL_DATA_KINDS", "ComposableStage", "check_chain_composition"]


class DataKind(enum.Enum):
    """The kind of data a serde stage receives or writes.

    ``KV_TENSORS``: KV-cache tensors as L1 holds them (what the first stage of a chain gets).
    ``BYTES``: an opaque byte buffer (quantized or compressed output). ``CIPHERTEXT``: encrypted
    bytes, indistinguishable from random — compressing or quantizing them is pointless.
    """

    KV_TENSORS = "kv_tensors"
    BYTES = "bytes"
    CIPHERTEXT = "ciphertext"


#: The default of ``SerdeSpec.consumes``: unknown third-party serdes stay unrestricted.
ALL_DATA_KINDS: frozenset[DataKind] = frozenset(DataKind)


def _names(kinds: frozenset[DataKind]) -> str:
    return ", ".join(k.value for k in sorted(kinds, key=lambda k: k.value))


class ComposableStage(Protocol):
    """What the composition check reads of a stage (a :class:`~lmserde.SerdeSpec` has it all):
    declared here so that this module, below the spec, never imports it."""

    @property
    def consumes(self) -> frozenset[DataKind]: ...

    @property
    def produces(self) -> DataKind: ...

    @property
    def consumes_hint(self) -> str: ...


def check_chain_composition(stages: Sequence[tuple[str, ComposableStage]]) -> None:
    """``ValueError`` unless every stage accepts what the stage before it produces.

    ``stages`` are ``(type name, spec)`` in store order. The first stage receives
    ``KV_TENSORS``; each later stage receives the previous stage's ``produces``. The message
    names the stage (position and type), what it got, what it accepts, the spec's
    ``consumes_hint`` and, after encryption, where the stage belongs instead (a second
    encryption stage — one that does not consume but produces ``CIPHERTEXT`` — is told to use a
    single encryption stage).
    """
    received = DataKind.KV_TENSORS
    previous = "the KV cache"
    for position, (name, spec) in enumerate(stages, start=1):
        accepted = frozenset(spec.consumes)
        if received not in accepted:
            message = (
                f"serde chain stage {position} ('{name}') cannot follow {previous}: it receives "
                f"{received.value} but accepts only {_names(accepted)}."
            )
            if spec.consumes_hint:
                message += f" {spec.consumes_hint}"
            if received is DataKind.CIPHERTEXT and spec.produces is DataKind.CIPHERTEXT:
                message += (
                    " Encrypting ciphertext again adds no protection and only grows every "
                    "object: use one encryption stage, the last of the chain."
                )
            elif received is DataKind.CIPHERTEXT:
                message += (
                    f" Compressing or quantizing after encryption is pointless (ciphertext does "
                    f"not compress and is not KV data): put '{name}' before the encryption stage."
                )
            elif not spec.consumes_hint and DataKind.KV_TENSORS in accepted:
                message += (
                    f" '{name}' works on KV tensors, so it must come first in the chain (only one "
                    "KV-level transform can be applied)."
                )
            raise ValueError(message)
        received = spec.produces
        previous = f"stage {position} ('{name}', which produces {received.value})"
