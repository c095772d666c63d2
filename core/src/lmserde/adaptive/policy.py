"""``AutoPolicy``: per object, the candidate serde with the least expected store + load time on
this adapter, from online measurements.

**The rule.** For candidate ``c`` and an object of ``raw`` KV bytes::

    expected(c) = raw / enc(c) + stored(c) / store_bw + R * (stored(c) / load_bw + raw / dec(c))
    stored(c)   = raw / ratio(c)

``enc(c)`` / ``dec(c)`` are ``c``'s encode / decode speeds in raw bytes per second, ``ratio(c)``
its compression ratio (raw / stored bytes), ``store_bw`` / ``load_bw`` the adapter's throughputs
in stored bytes per second, ``R`` the expected loads per store (:class:`PolicySettings`
``loads_per_store``, default 1: every object loaded once). Each is a moving estimate over the
last ``window`` observations (:class:`~lmserde.adaptive.moving_window.MovingRatio`: the sum of
bytes over the sum of seconds). The adapter's throughputs come from every object, whatever
candidate stored it; a candidate's codec speeds and ratio from the objects it stored (and
loaded). Before any load is seen, ``load_bw`` is taken as ``store_bw``; before a load of a
candidate is seen, its ``dec`` as its ``enc``. ``expected`` is linear in ``raw``, so the ranking
does not depend on the object's size: it is computed once per observation, and
:meth:`AutoPolicy.decide` costs a lock and a few comparisons.

**Choosing.** The first ``warmup`` decisions per candidate take turns (every candidate gets
measured); once every candidate has been measured (or a second round of turns has gone by
without), the candidate ranked best becomes the current one (event, reason ``initial``).
Afterwards another candidate replaces it only when its expected time is below ``(1 -
hysteresis)`` times the current one's on ``confirm`` consecutive re-evaluations
(**hysteresis**: noise in the estimates does not make the choice flip). **Exploration**: one
decision in ``explore_every`` (a fixed phase from ``seed``; deterministic) stores the object with
the candidate tried least recently, so every candidate's codec speed and ratio stay current (the
data and the CPU's load change too) at a bounded cost (at most ``1 / explore_every`` of the
objects). **Switch bound**: after the adapter's throughput changes, the store window holds only
new observations once ``window`` observations have been heard (the serde wrapper reports one per
candidate a store task used: one per object for one-object tasks), so when the change makes
another candidate cheaper by more than the hysteresis margin, the choice switches within
``window + confirm`` observations of stores (and loads) after the change — in practice within a
few, because the sum of seconds reacts to a slow transfer at once.

**Quality.** Candidates above ``max_attention_error`` are refused when the policy is built
(:func:`~lmserde.adaptive.candidates.admit_candidates`) and never chosen.

Thread-safe: one lock around every method. Each change of the current candidate is an event
(:class:`~lmserde.observability.PolicyChangeEvent`) delivered through the ``lmserde_policy_changed``
hook, off the caller's thread.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from typing import Any

from lmserde.adaptive.candidates import Candidate, admit_candidates
from lmserde.adaptive.moving_window import MovingRatio
from lmserde.adaptive.settings import PolicySettings
from lmserde.hooks import emit_policy_change_event, load_hook_plugins
from lmserde.observability import PolicyChangeEvent

__all__ = ["AutoPolicy"]

_log = logging.getLogger(__name__)

_GIB = float(2**30)
_INF = float("inf")


class _CandidateStats:
    """One admitted candidate's moving estimates and counters."""

    __slots__ = ("choices", "decode", "encode", "explorations", "last_tried", "ratio")

    def __init__(self, window: int) -> None:
        self.encode = MovingRatio(window)  # raw bytes / encode seconds
        self.decode = MovingRatio(window)  # raw bytes / decode seconds
        self.ratio = MovingRatio(window)  # raw bytes / stored bytes
        self.choices = 0
        self.explorations = 0
        self.last_tried = -1


def _seconds_per_byte(stats: _CandidateStats, store_bw: float, load_bw: float,
                      loads_per_store: float) -> float | None:
    """The rule of the module docstring per raw byte; ``None`` until the candidate has stored."""
    enc, ratio = stats.encode.value(), stats.ratio.value()
    if enc is None or ratio is None:
        return None
    dec = stats.decode.value() or enc
    per_stored = 1.0 / ratio  # stored bytes per raw byte
    return (1.0 / enc + per_stored / store_bw
            + loads_per_store * (per_stored / load_bw + 1.0 / dec))


def _check_observation(*values: float) -> None:
    for v in values:
        if not 0.0 <= v < _INF:
            raise ValueError(f"an observation is finite and >= 0, got {values!r}")


class AutoPolicy:
    """Chooses, per object, which candidate stores it (see the module docstring for the rule).

    ``candidates`` in the order of the ``auto`` config (indices returned by :meth:`decide` and
    taken by ``observe_*`` are positions in it); ``name`` names the policy in metrics and events;
    ``emit_events=False`` keeps it from emitting hook events (a replay in ``lmserde bench``).
    ``ValueError`` for no candidates, repeated names, or a quality bound that refuses them all.
    """

    def __init__(self, candidates: Sequence[Candidate], settings: PolicySettings | None = None, *,
                 name: str = "auto", emit_events: bool = True) -> None:
        self._settings = settings or PolicySettings()
        self._candidates = tuple(candidates)
        admitted, self._refused = admit_candidates(self._candidates,
                                                   self._settings.max_attention_error)
        self._admitted = tuple(admitted)
        self._name = name
        self._emit = emit_events
        window = self._settings.window
        self._stats = {i: _CandidateStats(window) for i in admitted}
        self._store = MovingRatio(window)  # stored bytes / store seconds
        self._load = MovingRatio(window)  # stored bytes / load seconds
        self._stores_seen = 0
        self._loads_seen = 0
        self._warm_order = self._admitted * self._settings.warmup
        every = self._settings.explore_every
        self._explore_every = every if len(admitted) > 1 else 0
        self._phase = random.Random(self._settings.seed).randrange(every) if every else 0
        self._lock = threading.Lock()
        self._decisions = 0
        self._current: int | None = None
        self._costs: dict[int, float] = {}
        self._streak = 0
        self._switches = 0
        if emit_events:
            load_hook_plugins()  # once, here: never on the data path

    # -- what it was built with ----------------------------------------------------------------

    @property
    def name(self) -> str:
        """The policy's name in metrics and events."""
        return self._name

    @property
    def settings(self) -> PolicySettings:
        """The settings it runs with."""
        return self._settings

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Every candidate as given (refused ones included)."""
        return self._candidates

    @property
    def admitted(self) -> tuple[int, ...]:
        """Indices of the candidates the quality bound admits (the only ones ever chosen)."""
        return self._admitted

    @property
    def refused(self) -> dict[str, str]:
        """Why each refused candidate is refused, by name."""
        return dict(self._refused)

    @property
    def current(self) -> int | None:
        """The index of the candidate new objects are stored with (``None`` while warming up)."""
        return self._current

    # -- the data path ---------------------------------------------------------------------------

    def decide(self) -> int:
        """The index of the candidate to store the next object with: a warm-up turn, an
        exploration, or the current choice. Counts the choice; never blocks on anything but the
        policy's own lock."""
        with self._lock:
            n = self._decisions
            self._decisions = n + 1
            explored = False
            if n < len(self._warm_order):
                index = self._warm_order[n]
            elif self._current is None:  # warm-up done, measurements still on their way
                index = self._admitted[n % len(self._admitted)]
            elif self._explore_every and (n + self._phase) % self._explore_every == 0:
                index = self._stalest_other(self._current)
                explored = True
            else:
                index = self._current
            stats = self._stats[index]
            stats.choices += 1
            stats.explorations += explored
            stats.last_tried = n
            return index

    def _stalest_other(self, current: int) -> int:
        return min((i for i in self._admitted if i != current),
                   key=lambda i: self._stats[i].last_tried)

    def observe_store(self, index: int, raw_bytes: int, stored_bytes: int,
                      encode_seconds: float, store_seconds: float) -> None:
        """One object stored with candidate ``index``: ``raw_bytes`` of KV encoded in
        ``encode_seconds`` into ``stored_bytes``, which the adapter stored in ``store_seconds``.
        The adapter's throughput counts whatever the candidate (a refused one too).
        ``ValueError`` (nothing recorded) for a negative or non-finite number."""
        _check_observation(raw_bytes, stored_bytes, encode_seconds, store_seconds)
        with self._lock:
            self._store.add(stored_bytes, store_seconds)
            self._stores_seen += 1
            stats = self._stats.get(index)
            if stats is not None:
                stats.encode.add(raw_bytes, encode_seconds)
                stats.ratio.add(raw_bytes, stored_bytes)
            event = self._evaluate()
        self._publish(event)

    def observe_load(self, index: int, raw_bytes: int, stored_bytes: int,
                     decode_seconds: float, load_seconds: float) -> None:
        """One object stored with candidate ``index`` loaded: ``stored_bytes`` read by the
        adapter in ``load_seconds``, decoded into ``raw_bytes`` in ``decode_seconds``.
        ``ValueError`` (nothing recorded) for a negative or non-finite number."""
        _check_observation(raw_bytes, stored_bytes, decode_seconds, load_seconds)
        with self._lock:
            self._load.add(stored_bytes, load_seconds)
            self._loads_seen += 1
            stats = self._stats.get(index)
            if stats is not None:
                stats.decode.add(raw_bytes, decode_seconds)
            event = self._evaluate()
        self._publish(event)

    def _evaluate(self) -> PolicyChangeEvent | None:
        """Re-rank the candidates (under the lock); the event of a change of choice, if any."""
        store_bw = self._store.value()
        if store_bw is None:
            return None
        load_bw = self._load.value() or store_bw
        lps = self._settings.loads_per_store
        costs = {}
        for i, stats in self._stats.items():
            cost = _seconds_per_byte(stats, store_bw, load_bw, lps)
            if cost is not None:
                costs[i] = cost
        self._costs = costs
        if not costs:
            return None
        best = min(costs, key=costs.__getitem__)  # ties: the earlier candidate
        current = self._current
        if current is None:
            # every candidate measured after its warm-up turns, or a second round of turns
            # issued without (a candidate whose stores never complete does not stall the rest)
            warm = len(self._warm_order)
            if self._decisions < warm or (len(costs) < len(self._stats)
                                          and self._decisions < 2 * warm):
                return None
            return self._change(best, "initial")
        threshold = costs.get(current, float("inf")) * (1.0 - self._settings.hysteresis)
        if best == current or not costs[best] < threshold:
            self._streak = 0
            return None
        self._streak += 1
        if self._streak < self._settings.confirm:
            return None
        return self._change(best, "measured")

    def _change(self, index: int, reason: str) -> PolicyChangeEvent:
        previous = self._current
        self._current = index
        self._streak = 0
        if previous is not None:
            self._switches += 1
        return PolicyChangeEvent(
            policy=self._name,
            previous=None if previous is None else self._candidates[previous].name,
            current=self._candidates[index].name, reason=reason, decisions=self._decisions,
            expected_seconds_per_gib={self._candidates[i].name: c * _GIB
                                      for i, c in self._costs.items()},
            store_bytes_per_second=self._store.value(),
            load_bytes_per_second=self._load.value())

    def _publish(self, event: PolicyChangeEvent | None) -> None:
        if event is None:
            return
        _log.info("%s: stores new objects with %s (was %s; %s)", event.policy, event.current,
                  event.previous, event.reason)
        if self._emit:
            emit_policy_change_event(event)

    # -- what it knows ---------------------------------------------------------------------------

    def expected_seconds(self, raw_bytes: int) -> dict[str, float]:
        """Each measured candidate's expected store + load time of an object of ``raw_bytes``,
        by name, as last ranked (empty before the adapter's first measured store)."""
        with self._lock:
            return {self._candidates[i].name: c * raw_bytes for i, c in self._costs.items()}

    def snapshot(self) -> dict[str, Any]:
        """The policy's state as plain values, for status output and Prometheus.

        ``policy``, ``current`` (name, ``None`` while warming up), ``decisions``, ``switches``
        (changes after the first choice), ``choices`` and ``explorations`` (objects per
        candidate name; explorations are part of choices), ``store_bytes_per_second`` /
        ``load_bytes_per_second`` (the adapter's moving throughputs, ``None`` before the first
        observation), ``stores_observed`` / ``loads_observed``, ``candidates`` (per name:
        ``lossy``, ``attention_error``, ``admitted``, and for admitted ones
        ``compression_ratio``, ``encode_bytes_per_second``, ``decode_bytes_per_second`` (each
        ``None`` until measured) and ``expected_seconds_per_gib`` (``None`` until ranked)),
        ``refused`` (name: why) and ``settings``.
        """
        with self._lock:
            per: dict[str, dict[str, Any]] = {}
            for i, c in enumerate(self._candidates):
                row: dict[str, Any] = {"lossy": c.lossy, "attention_error": c.attention_error,
                                       "admitted": i in self._stats}
                stats = self._stats.get(i)
                if stats is not None:
                    cost = self._costs.get(i)
                    row.update(compression_ratio=stats.ratio.value(),
                               encode_bytes_per_second=stats.encode.value(),
                               decode_bytes_per_second=stats.decode.value(),
                               expected_seconds_per_gib=None if cost is None else cost * _GIB)
                per[c.name] = row
            return {
                "policy": self._name,
                "current": None if self._current is None else self._candidates[self._current].name,
                "decisions": self._decisions,
                "switches": self._switches,
                "choices": {self._candidates[i].name: s.choices for i, s in self._stats.items()},
                "explorations": {self._candidates[i].name: s.explorations
                                 for i, s in self._stats.items()},
                "store_bytes_per_second": self._store.value(),
                "load_bytes_per_second": self._load.value(),
                "stores_observed": self._stores_seen,
                "loads_observed": self._loads_seen,
                "candidates": per,
                "refused": dict(self._refused),
                "settings": self._settings.as_dict(),
            }
