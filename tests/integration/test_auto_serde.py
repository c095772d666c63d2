"""Serde ``auto``: per object, the candidate with the least expected store + load time on this
adapter, measured online (real ``fs`` and ``memory`` tiers, throttled by the fault adapter's
bandwidth injection).

Objects are 2 MiB of compressible KV (bf16 values from 16 levels: zstd stores about 3.5x
less), so a fast tier stores raw bytes (zstd's codec time costs more than the bytes it saves)
and a tier throttled to 100 MB/s compresses. The fast tiers are ``memory``, and ``fs`` against
a slower zstd (level 9): on the shared two-core test machine an ``fs`` tier's measured speed
falls to ~300 MB/s under load, where compressing this data with the fast zstd is the right
choice (the policy's answer depends on what it measures).
The policy runs with ``window: 8, confirm: 2``: after a throttle, the choice switches within
``window + confirm`` = 10 objects (the bound of docs/adaptive.md). Every object is loaded back
and compared with what was stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for, open_fds
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, ObjectKey, SerdeSizeContract
from lmserde.adaptive import AutoPolicy, Candidate, PolicySettings
from lmserde.hooks import flush_events
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    parse_l2_adapter_spec,
)
from lmserde.l2.adapters.fault import FaultInjectingL2Adapter
from lmserde.l2.serde.stored_frame import parse_header
from lmserde.l2.serde.wrapper import AutoWrites
from lmserde.memory import MemoryObj, TensorMemoryObj
from lmserde.observability import PolicyChangeEvent

pytest.importorskip("lmserde_zstd", reason="auto chooses between raw bytes and zstd here")
pytest.importorskip("lmserde_fp8", reason="the lossy candidates are fp8 and fp8 + zstd")

KV = MemoryLayoutDesc([[512, 2, 8, 128]], [torch.bfloat16])  # 2 MiB: codec time beats noise
IDENTITY: dict[str, Any] = {"type": "identity"}
ZSTD: dict[str, Any] = {"type": "zstd"}
FP8: dict[str, Any] = {"type": "fp8"}
WINDOW, CONFIRM = 8, 2
SWITCH_BOUND = WINDOW + CONFIRM  # docs/adaptive.md, "Switch bound"
SLOW = 100e6  # bytes per second


def _object(seed: int) -> MemoryObj:
    """Compressible KV: bf16 values from 16 levels (zstd: about 3.5x)."""
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(KV)
    levels = torch.randint(-8, 8, (obj.get_size() // 2,), generator=gen).float() / 4
    obj.raw_data[:obj.get_size()].view(torch.bfloat16).copy_(levels.to(torch.bfloat16))
    return obj


def _bytes(obj: MemoryObj) -> torch.Tensor:
    return obj.raw_data[:obj.get_size()].clone()


def _auto(candidates: list[Any], **options: Any) -> dict[str, Any]:
    return {"type": "auto", "candidates": candidates, "window": WINDOW, "confirm": CONFIRM,
            **options}


def _open(base: Path | None, cache: Cache, serde: Any, bandwidth: float = 0.0,
          **extra: Any) -> SerdeL2AdapterWrapper:
    """A fault adapter over ``fs`` at ``base`` (``memory`` for ``None``) with ``serde``."""
    inner = {"type": "memory"} if base is None else {"type": "fs", "base_path": str(base)}
    spec = {"type": "fault", "inner": inner,
            "bandwidth_bytes_per_second": bandwidth, "serde": serde, **extra}
    wrapper = create_l2_adapter(spec, cache.l1)
    assert isinstance(wrapper, SerdeL2AdapterWrapper)
    return wrapper


class Run:
    """Stores objects one task at a time, loads each back at once, and remembers them all."""

    def __init__(self, wrapper: SerdeL2AdapterWrapper, cache: Cache) -> None:
        self.wrapper = wrapper
        self.cache = cache
        self.stored: dict[ObjectKey, torch.Tensor] = {}

    def step(self) -> None:
        i = len(self.stored)
        key, obj = key_of(i, salt="auto"), _object(i)
        assert self.cache.store(self.wrapper, [key], [obj]).is_successful()
        self.stored[key] = _bytes(obj)
        hits, data = self.cache.load(self.wrapper, [key], KV)
        assert hits.to_list() == [True]
        assert torch.equal(data[0], self.stored[key])  # bit-exact: both candidates are lossless

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.step()

    def reload_all(self) -> None:
        keys = list(self.stored)
        hits, data = self.cache.load(self.wrapper, keys, [KV] * len(keys))
        assert hits.to_list() == [True] * len(keys)
        for key, loaded in zip(keys, data):
            assert torch.equal(loaded, self.stored[key])

    @property
    def policy(self) -> Any:
        policy = self.wrapper.auto_policy
        assert policy is not None
        return policy

    def current(self) -> str | None:
        current = self.policy.current
        return None if current is None else self.policy.candidates[current].name


def _written_by(base: Path, key: ObjectKey) -> int:
    """The config fingerprint the stored object's frame names (what the frame records)."""
    return parse_header((base / key_file_name(key)).read_bytes()[:FRAME_HEADER_BYTES]
                        ).config_fingerprint


def _fingerprints(wrapper: SerdeL2AdapterWrapper) -> dict[int, str]:
    return {r.config_id: r.label for r in wrapper.read_configs if r.config_id is not None}


@pytest.mark.parametrize("on_fs, zstd", [
    (False, ZSTD),  # memory: GB/s, the fast zstd still costs more than the bytes it saves
    (True, {"type": "zstd", "level": 9}),  # real fs (~0.3-2 GB/s here), a slower zstd (~30 MB/s)
], ids=["memory", "fs"])
def test_a_fast_tier_stores_mostly_raw_bytes(tmp_path: Path, cache: Cache, on_fs: bool,
                                             zstd: dict[str, Any]) -> None:
    with _open(tmp_path if on_fs else None, cache, _auto([IDENTITY, zstd])) as wrapper:
        run = Run(wrapper, cache)
        run.steps(16)
        assert run.current() == "identity", wrapper.report_status()["serde_auto"]
        choices = wrapper.report_status()["serde_auto"]["choices"]
        assert choices["identity"] >= 11 and sum(choices.values()) == 16
        assert choices["zstd"] >= 2  # warm-up measured it
        run.reload_all()


def test_a_tier_throttled_to_100_mb_per_s_compresses(tmp_path: Path, cache: Cache) -> None:
    with _open(tmp_path, cache, _auto([IDENTITY, ZSTD]), bandwidth=SLOW) as wrapper:
        run = Run(wrapper, cache)
        run.steps(12)
        status = wrapper.report_status()["serde_auto"]
        assert run.current() == "zstd", status
        assert status["choices"]["zstd"] >= 8
        assert status["store_bytes_per_second"] < SLOW  # measured, throttle included
        run.reload_all()
        written = _fingerprints(wrapper)
    stored = [written[_written_by(tmp_path, k)] for k in run.stored]
    assert stored.count("zstd") == status["choices"]["zstd"]  # the frame says who wrote it
    assert stored.count("identity") == status["choices"]["identity"]


def test_throttling_mid_run_switches_within_the_bound_and_every_object_loads(
        cache: Cache, policy_events: list[PolicyChangeEvent]) -> None:
    with _open(None, cache, _auto([IDENTITY, ZSTD], explore_every=4)) as wrapper:
        run = Run(wrapper, cache)
        run.steps(10)
        assert run.current() == "identity", wrapper.report_status()["serde_auto"]
        before = len(run.stored)
        fault = wrapper.inner_adapter
        assert isinstance(fault, FaultInjectingL2Adapter)
        fault.set_bandwidth(SLOW)
        for _ in range(SWITCH_BOUND):
            run.step()
            if run.current() == "zstd":
                break
        assert run.current() == "zstd", wrapper.report_status()["serde_auto"]
        assert len(run.stored) - before <= SWITCH_BOUND
        run.steps(6)  # after the switch: compressing, with an exploration of raw bytes
        run.reload_all()  # before, during and after the switch: every object, bit-exact
        choices = wrapper.report_status()["serde_auto"]["choices"]
    assert choices["zstd"] >= 5 and choices["identity"] >= 6
    assert flush_events()
    changes = [(e.previous, e.current, e.reason) for e in policy_events if e.policy == "auto"]
    assert changes[0][0] is None and changes[0][2] == "initial"  # the first choice
    assert changes[-1] == ("identity", "zstd", "measured")  # the throttle's switch, an event


def test_lossy_candidates_load_what_each_one_decodes(tmp_path: Path, cache: Cache) -> None:
    keys = [key_of(i, salt="lossy") for i in range(6)]
    objects = objects_for(KV, 6, seed=100)  # normal values: fp8 rounds them
    with create_l2_adapter({"type": "memory", "serde": FP8}, cache.l1) as plain:
        assert cache.store(plain, keys, objects).is_successful()
        hits, fp8_decoded = cache.load(plain, keys, [KV] * 6)  # what fp8 alone gives back
        assert all(hits.to_list())
    with _open(tmp_path, cache, _auto([FP8, [FP8, ZSTD]], warmup=3)) as wrapper:
        for key, obj in zip(keys, objects):  # warm-up: the two candidates take turns
            assert cache.store(wrapper, [key], [obj]).is_successful()
        hits, data = cache.load(wrapper, keys, [KV] * 6)
        written = _fingerprints(wrapper)
    assert hits.to_list() == [True] * 6
    assert {written[_written_by(tmp_path, k)] for k in keys} == {"fp8", "fp8+zstd"}
    for loaded, expected, obj in zip(data, fp8_decoded, objects):
        assert torch.equal(loaded, expected)  # fp8+zstd decodes to fp8's values
        assert not torch.equal(loaded, _bytes(obj))  # (lossy: not the stored bytes)


def test_auto_reads_read_also_objects_and_read_also_reads_auto_candidates(
        tmp_path: Path, cache: Cache) -> None:
    old = [key_of(i, salt="old") for i in range(3)]
    old_objects = [_object(200 + i) for i in range(3)]
    with _open(tmp_path, cache, FP8) as plain:
        assert cache.store(plain, old, old_objects).is_successful()
        _, fp8_decoded = cache.load(plain, old, [KV] * 3)
    auto = _auto([IDENTITY, ZSTD])
    new = [key_of(i, salt="new") for i in range(4)]
    new_objects = [_object(300 + i) for i in range(4)]
    with _open(tmp_path, cache, auto, read_also=[FP8]) as wrapper:
        assert wrapper.report_status()["serde_read_also"] == ["fp8"]
        hits, data = cache.load(wrapper, old, [KV] * 3)
        assert hits.to_list() == [True] * 3 and all(
            torch.equal(a, b) for a, b in zip(data, fp8_decoded))
        for key, obj in zip(new, new_objects):  # warm-up: identity, then zstd, ...
            assert cache.store(wrapper, [key], [obj]).is_successful()
        hits, data = cache.load(wrapper, new, [KV] * 4)  # the candidates' own: no read_also hits
        assert hits.to_list() == [True] * 4
        assert all(torch.equal(a, _bytes(o)) for a, o in zip(data, new_objects))
        assert wrapper.metrics()["read_also_hits"] == {"fp8": 3}
        assert wrapper.metrics()["load_hits_read_also"] == 3
    # a later config lists the auto config in read_also: every candidate's objects still hit
    with _open(tmp_path, cache, FP8, read_also=[auto]) as later:
        hits, data = cache.load(later, new, [KV] * 4)
        assert later.metrics()["read_also_hits"] == {"identity": 2, "zstd": 2}
    assert hits.to_list() == [True] * 4
    assert all(torch.equal(a, _bytes(o)) for a, o in zip(data, new_objects))
    with _open(tmp_path, cache, FP8) as unlisted:  # without read_also: misses, and kept
        hits, _ = cache.load(unlisted, new, [KV] * 4)
    assert hits.to_list() == [False] * 4
    assert all((tmp_path / key_file_name(k)).exists() for k in new)


def test_status_and_prometheus_show_choices_and_measured_bandwidth(tmp_path: Path,
                                                                    cache: Cache) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    from lmserde.l2.serde.prometheus_export import register_wrapper

    registry = prometheus.CollectorRegistry()
    with _open(tmp_path, cache, _auto([IDENTITY, ZSTD])) as wrapper:
        register_wrapper(wrapper, name="kv", registry=registry)
        run = Run(wrapper, cache)
        run.steps(6)
        status = wrapper.report_status()
        auto = status["serde_auto"]

        def sample(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, {"adapter": "kv", "serde": "auto", **labels})

        assert status["serde_type"] == "auto"
        assert sum(auto["choices"].values()) == 6
        # every store and load measured but each candidate's first (one-time costs)
        assert auto["stores_observed"] == auto["loads_observed"] == 6 - len(auto["choices"])
        for name, count in auto["choices"].items():
            assert sample("lmserde_wrapper_auto_choices_total", candidate=name) == count
        assert sample("lmserde_wrapper_auto_current", candidate=auto["current"]) == 1.0
        store_bw = sample("lmserde_wrapper_auto_bandwidth_bytes", direction="store")
        assert store_bw is not None and store_bw == pytest.approx(auto["store_bytes_per_second"])
        assert sample("lmserde_wrapper_auto_bandwidth_bytes", direction="load") is not None
        assert sample("lmserde_wrapper_auto_switches_total") == auto["switches"]


def test_the_quality_bound_refuses_lossy_candidates_at_config_time(tmp_path: Path,
                                                                    cache: Cache) -> None:
    declared = {"fp8": 0.02, "fp8+zstd": 0.02}
    bounded = _auto([IDENTITY, FP8, [FP8, ZSTD]], max_attention_error=0.01,
                    attention_errors=declared)
    with _open(tmp_path, cache, bounded) as wrapper:
        auto = wrapper.report_status()["serde_auto"]
        Run(wrapper, cache).steps(3)
        choices = wrapper.report_status()["serde_auto"]["choices"]
    assert set(auto["refused"]) == {"fp8", "fp8+zstd"}
    assert choices == {"identity": 3}
    with pytest.raises(ValueError, match="refuses every candidate"):
        _open(tmp_path, cache, _auto([FP8], max_attention_error=0.01,
                                     attention_errors={"fp8": 0.02}))
    with pytest.raises(ValueError, match="refuses every candidate"):  # unknown error: refused
        _open(tmp_path, cache, _auto([FP8], max_attention_error=0.5))
    with _open(tmp_path, cache, _auto([IDENTITY, FP8], max_attention_error=0.05,
                                      attention_errors={"fp8": 0.02})) as wrapper:
        assert wrapper.report_status()["serde_auto"]["refused"] == {}


@pytest.mark.parametrize(("serde", "extra", "message"), [
    ({"type": "auto"}, {}, "needs 'candidates'"),
    ({"type": "auto", "candidates": []}, {}, "needs 'candidates'"),
    ({"type": "auto", "candidates": [IDENTITY], "windw": 3}, {}, "unknown option.*windw"),
    ({"type": "auto", "candidates": [IDENTITY], "window": 0}, {}, "window must be"),
    ({"type": "auto", "candidates": [IDENTITY, {"type": "nope"}]}, {}, "nope"),
    ({"type": "auto", "candidates": [IDENTITY, {"type": "auto", "candidates": [ZSTD]}]}, {},
     "candidate 1 is 'auto'"),
    ({"type": "auto", "candidates": [IDENTITY, IDENTITY]}, {}, "unique"),
    ({"type": "auto", "candidates": [IDENTITY], "attention_errors": {"fp8": 0.1}}, {},
     "names no candidate"),
    ([{"type": "auto", "candidates": [IDENTITY]}, ZSTD], {}, "cannot be a stage of a chain"),
    ({"type": "auto", "candidates": [IDENTITY]}, {"serde_frame": False}, "framed objects"),
])
def test_bad_auto_configs_are_refused_before_anything_is_built(
        tmp_path: Path, cache: Cache, serde: Any, extra: dict[str, Any], message: str) -> None:
    spec = {"type": "fs", "base_path": str(tmp_path), "serde": serde, **extra}
    with pytest.raises(ValueError, match=message):
        create_l2_adapter(parse_l2_adapter_spec(spec), cache.l1)
    assert list(tmp_path.iterdir()) == []


def test_closing_closes_every_candidate_processor(tmp_path: Path, cache: Cache) -> None:
    fds = open_fds()
    wrapper = _open(tmp_path, cache, _auto([IDENTITY, ZSTD, [FP8, ZSTD]]), read_also=[FP8])
    Run(wrapper, cache).steps(3)  # each candidate once
    readers = list(wrapper.read_configs)
    assert [r.label for r in readers] == ["identity", "zstd", "fp8+zstd", "fp8"]
    wrapper.close()
    assert open_fds() == fds  # every processor's event fds and threads released
    assert wrapper.report_status()["is_healthy"] is False
    assert "hung_at_close" not in wrapper.metrics() or not wrapper.metrics()["hung_at_close"]


def test_scrub_counts_every_candidate_as_current_and_migrate_rewrites_read_also(
        tmp_path: Path, cache: Cache) -> None:
    from lmserde.l2 import migrate_adapter, scrub_adapter

    old = [key_of(i, salt="old") for i in range(2)]
    with _open(tmp_path, cache, FP8) as plain:
        assert cache.store(plain, old, [_object(400 + i) for i in range(2)]).is_successful()
        _, fp8_decoded = cache.load(plain, old, [KV] * 2)
    spec = {"type": "fs", "base_path": str(tmp_path), "serde": _auto([IDENTITY, ZSTD]),
            "read_also": [FP8]}
    new = [key_of(i, salt="new") for i in range(4)]
    with create_l2_adapter(spec, cache.l1) as wrapper:
        for i, key in enumerate(new):  # warm-up turns: identity, zstd, ...
            assert cache.store(wrapper, [key], [_object(500 + i)]).is_successful()
        assert wrapper.written_configs == 2
        assert scrub_adapter(wrapper).verdicts == {"ok": 4, "read_also": 2}
        report = migrate_adapter(wrapper)
        assert sorted(report.migrated, key=lambda k: k.chunk_hash) == sorted(
            old, key=lambda k: k.chunk_hash) and report.failed == {}
        assert scrub_adapter(wrapper).verdicts == {"ok": 6}
        hits, data = cache.load(wrapper, old, [KV] * 2)  # now a candidate's, same values
    assert hits.to_list() == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(data, fp8_decoded))


def test_a_read_also_config_named_like_a_candidate_is_told_apart(tmp_path: Path,
                                                                 cache: Cache) -> None:
    other_zstd = {"type": "zstd", "level": 3}
    key, obj = key_of(0, salt="zstd3"), _object(600)
    with _open(tmp_path, cache, other_zstd) as plain:
        assert cache.store(plain, [key], [obj]).is_successful()
    with _open(tmp_path, cache, _auto([IDENTITY, ZSTD]), read_also=[other_zstd]) as wrapper:
        labels = [r.label for r in wrapper.read_configs]
        (read_label,) = wrapper.report_status()["serde_read_also"]
        hits, data = cache.load(wrapper, [key], KV)
        assert wrapper.metrics()["read_also_hits"] == {read_label: 1}
    assert labels[:2] == ["identity", "zstd"] and read_label.startswith("zstd@")
    assert hits.to_list() == [True] and torch.equal(data[0], _bytes(obj))


class _ExitingSerializer(IdentitySerializer):
    """A plugin serializer that raises ``SystemExit`` (contained: the store fails, only it)."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        raise SystemExit(3)


def test_a_candidate_that_raises_fails_only_its_stores(tmp_path: Path, cache: Cache) -> None:
    good = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 1, serde_type="t_a")
    bad = AsyncSerdeProcessor(_ExitingSerializer(), IdentityDeserializer(), 1, serde_type="t_b")
    policy = AutoPolicy([Candidate("t_a", lossy=False), Candidate("t_b", lossy=False)],
                        PolicySettings(window=4, explore_every=0), emit_events=False)
    inner = create_l2_adapter({"type": "fs", "base_path": str(tmp_path)}, cache.l1)
    with SerdeL2AdapterWrapper(inner, good, cache.l1, serde_type="t_a",
                               auto=AutoWrites(((bad, "t_b", SerdeSizeContract.EXACT),),
                                               policy)) as wrapper:
        results = [cache.store(wrapper, [key_of(i, salt="exit")], [_object(700 + i)])
                   .is_successful() for i in range(12)]
        status = wrapper.report_status()
        kept = [i for i, ok in enumerate(results) if ok]
        hits, data = cache.load(wrapper, [key_of(i, salt="exit") for i in kept], [KV] * len(kept))
    # warm-up takes turns (t_b's stores fail, nothing else does), then t_a, the only one measured
    choices = status["serde_auto"]["choices"]
    assert results.count(False) == choices["t_b"] >= 2
    assert status["serde_wrapper"]["failures"].get("serialize") == choices["t_b"]
    assert status["serde_auto"]["current"] == "t_a" and results[-4:] == [True] * 4
    assert hits.to_list() == [True] * len(kept)
    assert all(torch.equal(d, _bytes(_object(700 + i))) for d, i in zip(data, kept))


def test_a_split_tier_serde_is_no_candidate(tmp_path: Path, cache: Cache) -> None:
    pytest.importorskip("lmserde_asym_k16_v8", reason="the split-tier serde is asym_k16_v8_v_only")
    fds = open_fds()
    with pytest.raises(ValueError, match="split-tier"):
        _open(tmp_path, cache, _auto([IDENTITY, {"type": "asym_k16_v8_v_only"}]))
    assert open_fds() == fds  # every candidate built so far closed, and the adapter


@pytest.mark.parametrize("doc", ["docs/adaptive.md", "docs/user-guide.md"])
def test_the_documented_auto_specs_are_valid(doc: str) -> None:
    import json
    import re

    from lmserde.l2.build import AutoSerdeConfig, resolve_serde_value

    text = (Path(__file__).resolve().parents[2] / doc).read_text(encoding="utf-8")
    specs = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", text, re.DOTALL)
             if '"type": "auto"' in b]
    assert specs, f"{doc} shows no auto spec"
    for spec in specs:
        config = parse_l2_adapter_spec(spec)
        assert isinstance(config.serde_config, AutoSerdeConfig)
        resolve_serde_value(config.serde_config)  # every candidate and option checked


def test_lmserde_info_auto_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from lmserde.cli.main import main

    assert main(["info", "auto"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("auto: chooses") and "docs/adaptive.md" in out
    assert "candidates, attention_errors=None, window=16" in out
    assert main(["info", "auto", "--json"]) == 0
    options = json.loads(capsys.readouterr().out)["options"]
    assert set(options) == {"candidates", "attention_errors", "window", "loads_per_store",
                            "hysteresis", "confirm", "explore_every", "warmup", "seed",
                            "max_attention_error"}


def test_auto_with_an_authenticated_frame_hides_names_and_reads_every_candidate(
        tmp_path: Path, cache: Cache) -> None:
    from lmserde.tenant_keys import write_master_key

    key_file = str(write_master_key(tmp_path / "frame.key"))
    base = tmp_path / "tier"
    spec = {"type": "fs", "base_path": str(base), "serde": _auto([IDENTITY, ZSTD]),
            "frame_key_path": key_file, "hide_names": True}
    keys = [key_of(i, salt="auth") for i in range(4)]
    objects = [_object(800 + i) for i in range(4)]
    with create_l2_adapter(spec, cache.l1) as wrapper:
        for key, obj in zip(keys, objects):  # warm-up turns: both candidates write
            assert cache.store(wrapper, [key], [obj]).is_successful()
        assert wrapper.report_status()["serde_auto"]["choices"] == {"identity": 2, "zstd": 2}
    assert not any((base / key_file_name(k)).exists() for k in keys)  # names hidden
    with create_l2_adapter(spec, cache.l1) as wrapper:  # a new process: the frame says who wrote
        hits, data = cache.load(wrapper, keys, [KV] * 4)
        assert wrapper.metrics()["rejections"] == {}
    assert hits.to_list() == [True] * 4
    assert all(torch.equal(d, _bytes(o)) for d, o in zip(data, objects))


def test_one_store_task_puts_its_objects_into_different_candidates(tmp_path: Path,
                                                                    cache: Cache) -> None:
    """One decision per object: the warm-up's turns alternate inside each 8-object task; each
    object's frame names its own candidate, every object loads bit for bit, and the policy hears
    one store observation per candidate group (each candidate's first store is not measured)."""
    keys = [key_of(i, salt="mixed") for i in range(16)]
    objects = [_object(800 + i) for i in range(16)]
    with _open(tmp_path, cache, _auto([IDENTITY, ZSTD], warmup=8)) as wrapper:
        assert cache.store(wrapper, keys[:8], objects[:8]).is_successful()
        assert cache.store(wrapper, keys[8:], objects[8:]).is_successful()
        names = _fingerprints(wrapper)
        written = [names[_written_by(tmp_path, key)] for key in keys]
        snapshot = Run(wrapper, cache).policy.snapshot()
        hits, data = cache.load(wrapper, keys, [KV] * len(keys))
    assert written == ["identity", "zstd"] * 8  # the warm-up's turns, object by object
    assert snapshot["decisions"] == 16 and snapshot["choices"] == {"identity": 8, "zstd": 8}
    assert snapshot["stores_observed"] == 2  # the second task's two groups
    assert hits.to_list() == [True] * 16
    assert all(torch.equal(d, _bytes(o)) for d, o in zip(data, objects))


class _RefusingSubmits(AsyncSerdeProcessor):
    """A processor whose ``submit_serialize`` raises (contained: the task fails)."""

    def submit_serialize(self, *args: Any, **kwargs: Any) -> int:
        raise RuntimeError("no serializing here")


@pytest.mark.parametrize("stage", ["serialize", "serialize_submit"])
def test_a_failing_candidate_fails_the_whole_mixed_task(tmp_path: Path, cache: Cache,
                                                        stage: str) -> None:
    """A task whose objects went to two candidates, one of which fails its serialize (its
    result, or its submit while the other group is already serializing): the task fails as one
    failed serialize, nothing of it is stored, every temporary goes back, later tasks store."""
    good = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 1, serde_type="t_a")
    bad = (AsyncSerdeProcessor(_ExitingSerializer(), IdentityDeserializer(), 1, serde_type="t_b")
           if stage == "serialize" else
           _RefusingSubmits(IdentitySerializer(), IdentityDeserializer(), 1, serde_type="t_b"))
    policy = AutoPolicy([Candidate("t_a", lossy=False), Candidate("t_b", lossy=False)],
                        PolicySettings(window=4, warmup=2, explore_every=0), emit_events=False)
    inner = create_l2_adapter({"type": "fs", "base_path": str(tmp_path)}, cache.l1)
    keys = [key_of(i, salt="mixfail") for i in range(4)]
    with SerdeL2AdapterWrapper(inner, good, cache.l1, serde_type="t_a",
                               auto=AutoWrites(((bad, "t_b", SerdeSizeContract.EXACT),),
                                               policy)) as wrapper:
        used = cache.l1.memory_used_bytes()
        mixed = cache.store(wrapper, keys, [_object(900 + i) for i in range(4)])
        failures = dict(wrapper.report_status()["serde_wrapper"]["failures"])
        released = cache.l1.memory_used_bytes() == used
        hits, _ = cache.load(wrapper, keys, [KV] * len(keys))
        later = [cache.store(wrapper, [key_of(10 + i, salt="mixfail")], [_object(910 + i)])
                 .is_successful() for i in range(6)]
    assert not mixed.is_successful() and failures.get(stage) == 1 and released
    assert hits.to_list() == [False] * 4
    assert not any((tmp_path / key_file_name(k)).exists() for k in keys)
    assert later == [True, False, True, False, True, True]  # turns until t_a is chosen
