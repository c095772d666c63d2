"""One way from a serde config to a serde: parse once, look up once, then build.

``{"type": "fp8", "scaling": "per_token"}`` (or a :class:`~lmserde.SerdeConfig`) is parsed by
:func:`as_serde_config` — the only place the ``type`` field is read and its errors are worded —
and resolved by :func:`resolve_serde` into a :class:`ResolvedSerde`: the type, its spec (one
registry lookup) and the validated options. Everything else comes from that: the processor
(:meth:`ResolvedSerde.build_processor`), the synchronous pair a chain stage runs
(:meth:`ResolvedSerde.build_pair`), the size contract and the identity config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lmserde.base import SerdeConfig, SerdeProcessor
from lmserde.plugin_discovery import PluginLoadError
from lmserde.registries import SERDES
from lmserde.spec import SerdePair, SerdeSizeContract, SerdeSpec

__all__ = ["as_serde_config", "resolve_serde", "ResolvedSerde", "BuiltPair",
           "PROCESSOR_METHODS", "check_built_processor"]

#: What an object needs to serve as a processor when it is not a
#: :class:`~lmserde.SerdeProcessor` (an upstream, duck-typed one): these methods, callable.
PROCESSOR_METHODS = ("get_serialize_event_fd", "get_deserialize_event_fd", "submit_serialize",
                     "query_serialize_result", "submit_deserialize", "query_deserialize_result",
                     "estimate_serialized_size", "close")


def check_built_processor(serde_type: str, obj: Any) -> Any:
    """``obj`` if a factory for ``serde_type`` may return it, else :class:`PluginLoadError`.

    A :class:`~lmserde.SerdeProcessor` is accepted, and so is a duck-typed upstream processor
    with every method of :data:`PROCESSOR_METHODS`. Anything else (``None``, a pair, a dict) is a
    plugin error naming the plugin, its origin, what it returned and what was expected, instead
    of an ``AttributeError`` the first time the object is used.
    """
    if isinstance(obj, SerdeProcessor):
        return obj
    missing = [m for m in PROCESSOR_METHODS if not callable(getattr(obj, m, None))]
    if not missing:
        return obj
    shown = repr(obj)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise PluginLoadError(
        f"serde '{serde_type}' ({SERDES.origin(serde_type)}) failed to build: its factory "
        f"returned {type(obj).__name__} {shown}, expected an lmserde.SerdeProcessor (or an "
        f"object with the processor methods; missing: {', '.join(missing)})"
    )


def as_serde_config(value: SerdeConfig | Mapping[str, Any] | Any) -> SerdeConfig:
    """``value`` as a :class:`~lmserde.SerdeConfig` (upstream error texts for bad input).

    A dict gives ``type`` plus every other key as kwargs; a dict without a ``str`` ``type`` raises
    ``ValueError("'serde' dict must include a 'type' field")``, anything else but a
    ``SerdeConfig`` ``ValueError("'serde' must be a dict, ...")``.
    """
    if isinstance(value, SerdeConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"'serde' must be a dict, got {type(value).__name__} (or a list of dicts, a chain "
            "applied in order)"
        )
    serde_type = value.get("type")
    if not isinstance(serde_type, str):
        raise ValueError("'serde' dict must include a 'type' field")
    return SerdeConfig(type=serde_type, kwargs={k: v for k, v in value.items() if k != "type"})


@dataclass(frozen=True)
class BuiltPair:
    """A chain stage's pair and the processor it was taken from (``None`` for a spec with a
    ``pair_factory``; otherwise the caller owns it and closes it with the chain)."""

    pair: SerdePair
    owner: SerdeProcessor | None = None


@dataclass(frozen=True)
class ResolvedSerde:
    """A serde config parsed, looked up and validated: everything needed to build it."""

    serde_type: str
    spec: SerdeSpec
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def size_contract(self) -> SerdeSizeContract:
        return self.spec.size_contract

    @property
    def max_workers(self) -> int:
        """The worker threads the options ask for (``max_workers``, default 1)."""
        return self.spec.workers(self.options)

    @property
    def close_timeout_s(self) -> float:
        """The seconds the processor's ``close()`` waits (``close_timeout_s``, default 10)."""
        return self.spec.close_timeout(self.options)

    def identity_config(self) -> dict[str, Any]:
        """What :meth:`~lmserde.SerdeProcessor.get_config` of the built processor returns."""
        return self.spec.identity_config(self.serde_type, self.options)

    def build_processor(self) -> SerdeProcessor:
        """The processor (:meth:`~lmserde.SerdeSpec.create_processor`), with its identity config
        and size contract attached.

        Whatever the plugin code raises (any ``BaseException``; only a main-thread
        ``KeyboardInterrupt`` propagates) is a :class:`~lmserde.PluginLoadError` naming the
        plugin, its distribution and version, exception chained; so is a factory that returns
        something that is not a processor (:func:`check_built_processor`).
        """
        processor = check_built_processor(self.serde_type, SERDES.build(
            self.serde_type, lambda: self.spec.create_processor(self.serde_type, self.options)))
        if not isinstance(processor, SerdeProcessor):
            return processor  # a duck-typed upstream processor: nothing to attach to
        try:
            processor.set_config(self.identity_config())
            if processor.size_contract is None:
                processor.size_contract = self.size_contract
        except BaseException:
            processor.close()
            raise
        return processor

    def build_pair(self) -> BuiltPair:
        """The synchronous pair a chain stage runs.

        From the ``pair_factory`` when the spec has one (nothing else is built); otherwise the
        processor is built and its :meth:`~lmserde.SerdeProcessor.serde_pair` taken (the caller
        owns that processor) — a processor without a pair cannot be chained (``ValueError``).
        """
        if self.spec.pair_factory is not None:
            return BuiltPair(SERDES.build(self.serde_type,
                                          lambda: self.spec.create_pair(self.options)))
        processor = self.build_processor()
        pair = processor.serde_pair() if isinstance(processor, SerdeProcessor) else None
        if pair is None:
            processor.close()
            raise ValueError(
                f"serde '{self.serde_type}' cannot be chained: its processor "
                f"({type(processor).__name__}) does not expose its serializer and deserializer "
                "(give its spec a pair_factory)"
            )
        return BuiltPair(pair, processor)


def resolve_serde(config: SerdeConfig | Mapping[str, Any]) -> ResolvedSerde:
    """Parse ``config``, look its type up and validate its options; nothing is built.

    ``ValueError`` for a bad config, an unknown type (with an install hint for the serdes of
    this repository) or invalid options (naming the option and the accepted ones);
    :class:`~lmserde.PluginLoadError` when the plugin cannot be imported.
    """
    parsed = as_serde_config(config)
    spec = SERDES.get(parsed.type)
    return ResolvedSerde(parsed.type, spec, spec.validate(parsed.type, parsed.kwargs))
