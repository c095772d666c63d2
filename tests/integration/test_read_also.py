"""``read_also``: a tier keeps loading the objects earlier serde configs wrote, and
``lmserde scrub --migrate`` rewrites them in the current config (real ``fs``)."""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for, open_fds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, ObjectKey
from lmserde.cli.main import main
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    scrub_adapter,
)
from lmserde.l2.serde.migrate import migrate_adapter
from lmserde.l2.serde.stored_frame import parse_header
from lmserde.spec import SerdeSizeContract
from toy_serdes import OutageDeserializer, make_processor

pytest.importorskip("lmserde_fp8", reason="these tests switch a tier from fp8")
pytest.importorskip("lmserde_zstd", reason="these tests switch a tier to fp8 + zstd")

KV = MemoryLayoutDesc([[16, 2, 8, 128]], [torch.bfloat16])
FP8: dict[str, Any] = {"type": "fp8"}
FP8_ZSTD: list[dict[str, Any]] = [{"type": "fp8"}, {"type": "zstd"}]
IDENTITY: dict[str, Any] = {"type": "identity"}


def _spec(base: Path, serde: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "fs", "base_path": str(base), "serde": serde, **extra}


def _open(base: Path, l1: L1Manager, serde: Any, **extra: Any) -> SerdeL2AdapterWrapper:
    wrapper = create_l2_adapter(_spec(base, serde, **extra), l1)
    assert isinstance(wrapper, SerdeL2AdapterWrapper)
    return wrapper


def _fill(base: Path, cache: Cache, serde: Any, keys: list[ObjectKey], seed: int = 0) -> None:
    with _open(base, cache.l1, serde) as wrapper:
        assert cache.store(wrapper, keys, objects_for(KV, len(keys), seed)).is_successful()


def _load(base: Path, cache: Cache, serde: Any, keys: list[ObjectKey], **extra: Any
          ) -> tuple[list[bool], list[torch.Tensor], dict[str, Any]]:
    with _open(base, cache.l1, serde, **extra) as wrapper:
        hits, data = cache.load(wrapper, keys, KV)
        metrics = wrapper.metrics()
    return hits.to_list(), data, metrics


def _config_id(base: Path, l1: L1Manager, serde: Any) -> int:
    with _open(base, l1, serde) as wrapper:
        assert wrapper.framer is not None
        return wrapper.framer.config_id


def _stored_config(base: Path, key: ObjectKey) -> int:
    """The config fingerprint the stored object's frame names."""
    head = (base / key_file_name(key)).read_bytes()[:FRAME_HEADER_BYTES]
    return parse_header(head).config_fingerprint


def _keys(n: int, start: int = 0) -> list[ObjectKey]:
    return [key_of(i, salt="tenant-a") for i in range(start, start + n)]


def test_fp8_tier_switched_to_fp8_zstd_hits_with_fp8_bytes_then_migrates(
        tmp_path: Path, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    keys = _keys(8)
    _fill(tmp_path, cache, FP8, keys)
    hits, fp8_bytes, _ = _load(tmp_path, cache, FP8, keys)  # what fp8 alone decodes
    assert all(hits)
    fp8_id = _config_id(tmp_path, cache.l1, FP8)
    new_id = _config_id(tmp_path, cache.l1, FP8_ZSTD)
    assert {_stored_config(tmp_path, k) for k in keys} == {fp8_id}

    hits, data, metrics = _load(tmp_path, cache, FP8_ZSTD, keys, read_also=[FP8])
    assert all(hits)
    assert all(torch.equal(a, b) for a, b in zip(data, fp8_bytes))  # bit-exact fp8 decodes
    assert metrics["load_hits"] == 8 and metrics["load_hits_read_also"] == 8
    assert metrics["read_also_hits"] == {"fp8": 8}
    assert metrics["rejections"] == {} and metrics["repaired"] == 0

    spec = json.dumps(_spec(tmp_path, FP8_ZSTD, read_also=[FP8]))
    code = main(["scrub", spec, "--migrate", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["migrated"] == 8 and report["failed"] == []
    assert report["verdicts"] == {"read_also": 8}
    assert {_stored_config(tmp_path, k) for k in keys} == {new_id}

    # in the new config now: they hit without read_also, decoded by the chain, the same data
    hits, data, metrics = _load(tmp_path, cache, FP8_ZSTD, keys)
    assert all(hits) and metrics.get("load_hits_read_also") == 0
    assert all(torch.equal(a, b) for a, b in zip(data, fp8_bytes))

    code = main(["scrub", spec, "--migrate", "--json"])  # idempotent: nothing left to rewrite
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["migrated"] == 0 and report["verdicts"] == {"ok": 8}


def test_without_read_also_the_old_objects_miss_and_are_kept(tmp_path: Path,
                                                             cache: Cache) -> None:
    keys = _keys(5)
    _fill(tmp_path, cache, FP8, keys)
    hits, _, metrics = _load(tmp_path, cache, FP8_ZSTD, keys)  # repair is on
    assert hits == [False] * 5
    assert metrics["rejections"] == {"config": 5} and metrics["repaired"] == 0
    assert all((tmp_path / key_file_name(k)).exists() for k in keys)
    hits, _, _ = _load(tmp_path, cache, FP8_ZSTD, keys, read_also=[FP8])
    assert all(hits)


def test_a_config_not_listed_stays_a_miss_and_is_kept(
        tmp_path: Path, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    old, other = _keys(4), _keys(3, start=10)
    _fill(tmp_path, cache, FP8, old)
    _fill(tmp_path, cache, IDENTITY, other, seed=1)
    identity_id = _config_id(tmp_path, cache.l1, IDENTITY)
    hits, _, metrics = _load(tmp_path, cache, FP8_ZSTD, old + other, read_also=[FP8])
    assert hits == [True] * 4 + [False] * 3  # one task, mixed configs
    # identity objects are larger than any listed config writes: refused by their stored size,
    # unread ("foreign": not mine, kept)
    assert metrics["rejections"] == {"foreign": 3} and metrics["read_also_hits"] == {"fp8": 4}
    assert all((tmp_path / key_file_name(k)).exists() for k in other)

    spec = json.dumps(_spec(tmp_path, FP8_ZSTD, read_also=[FP8]))
    code = main(["scrub", spec, "--migrate", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["migrated"] == 4 and report["foreign"] == 3
    assert {_stored_config(tmp_path, k) for k in other} == {identity_id}  # untouched


def test_the_load_buffer_holds_the_largest_config(tmp_path: Path, cache: Cache) -> None:
    """identity objects are twice fp8's bound: a tier switched to fp8 still loads them whole."""
    keys = _keys(3)
    _fill(tmp_path, cache, IDENTITY, keys)
    hits, data, metrics = _load(tmp_path, cache, FP8, keys, read_also=[IDENTITY])
    assert all(hits)
    assert all(torch.equal(d, layout_bytes(o)) for d, o in zip(data, objects_for(KV, 3)))
    assert metrics["read_also_hits"] == {"identity": 3}


def test_an_interrupted_migration_continues_when_run_again(tmp_path: Path,
                                                           cache: Cache) -> None:
    keys = _keys(10)
    _fill(tmp_path, cache, FP8, keys)
    new_id = _config_id(tmp_path, cache.l1, FP8_ZSTD)

    class Interrupted(Exception):
        pass

    def stop(_n: int) -> None:
        raise Interrupted

    with _open(tmp_path, cache.l1, FP8_ZSTD, read_also=[FP8]) as wrapper, pytest.raises(Interrupted):
        migrate_adapter(wrapper, keys=keys, batch=3, on_progress=stop)
    moved = [k for k in keys if _stored_config(tmp_path, k) == new_id]
    assert moved == keys[:3]  # the first batch is complete, the rest untouched
    hits, _, metrics = _load(tmp_path, cache, FP8_ZSTD, keys, read_also=[FP8])
    assert all(hits) and metrics["load_hits_read_also"] == 7

    with _open(tmp_path, cache.l1, FP8_ZSTD, read_also=[FP8]) as wrapper:
        report = migrate_adapter(wrapper, batch=3)
    assert report.verdicts == {"ok": 3, "read_also": 7} and len(report.migrated) == 7
    assert {_stored_config(tmp_path, k) for k in keys} == {new_id}


def test_migrate_never_deletes_what_it_cannot_rewrite(tmp_path: Path, cache: Cache) -> None:
    """Through the fault adapter: every store fails, one key's load misses; nothing is lost."""
    keys = _keys(4)
    _fill(tmp_path, cache, FP8, keys)
    fp8_id = _config_id(tmp_path, cache.l1, FP8)
    spec = {"type": "fault", "inner": {"type": "fs", "base_path": str(tmp_path)},
            "store_failure_rate": 1.0, "miss_chunk_hashes": [keys[0].chunk_hash.hex()],
            "serde": FP8_ZSTD, "read_also": [FP8]}
    wrapper = create_l2_adapter(spec, cache.l1)
    assert isinstance(wrapper, SerdeL2AdapterWrapper)
    with wrapper:
        report = migrate_adapter(wrapper, keys=keys)
    assert report.migrated == []
    assert report.verdicts == {"missing": 1, "read_also": 3}  # the adapter said keys[0] is not there
    assert report.failed == {k: "store" for k in keys[1:]}
    assert {_stored_config(tmp_path, k) for k in keys} == {fp8_id}  # all kept, all old
    hits, _, _ = _load(tmp_path, cache, FP8_ZSTD, keys, read_also=[FP8])
    assert all(hits)


def test_scrub_counts_read_also_objects_as_readable(
        tmp_path: Path, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    keys = _keys(3)
    _fill(tmp_path, cache, FP8, keys)
    with _open(tmp_path, cache.l1, FP8_ZSTD, read_also=[FP8]) as wrapper:
        report = scrub_adapter(wrapper, decode=True)
    assert report.verdicts == {"read_also": 3} and not report.found_damage
    assert report.foreign == []
    code = main(["scrub", json.dumps(_spec(tmp_path, FP8_ZSTD, read_also=[FP8]))])
    assert code == 0
    assert "3 objects are in a read_also config" in capsys.readouterr().out


def test_migrate_needs_read_also_and_refuses_deleting_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = json.dumps(_spec(tmp_path, FP8_ZSTD))
    assert main(["scrub", spec, "--migrate"]) == 2
    assert "read_also" in capsys.readouterr().err
    spec = json.dumps(_spec(tmp_path, FP8_ZSTD, read_also=[FP8]))
    assert main(["scrub", spec, "--migrate", "--delete"]) == 2
    assert "never deletes" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    ({"read_also": [FP8_ZSTD]}, "current serde config"),
    ({"read_also": [FP8, FP8]}, "listed twice"),
    ({"read_also": [FP8], "serde_frame": False}, "framed objects"),
    ({"read_also": "fp8"}, "must be a list"),
    ({"read_also": [[FP8, "zstd"]]}, "'read_also' item 0"),
    ({"read_also": [{"type": "fp8", "nope": 1}]}, "nope"),
])
def test_bad_read_also_is_refused_at_config_time(tmp_path: Path, l1: L1Manager,
                                                 extra: dict[str, Any], message: str) -> None:
    before = open_fds()
    with pytest.raises(ValueError, match=message):
        create_l2_adapter(_spec(tmp_path, FP8_ZSTD, **extra), l1)
    assert open_fds() == before  # nothing leaked: processors and adapter closed


def test_read_also_needs_a_serde(tmp_path: Path, l1: L1Manager) -> None:
    with pytest.raises(ValueError, match="only applies to an adapter with a 'serde'"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "read_also": [FP8]}, l1)


def test_a_split_tier_serde_refuses_read_also(tmp_path: Path, l1: L1Manager) -> None:
    pytest.importorskip("lmserde_asym_k16_v8")
    with pytest.raises(ValueError, match="split-tier"):
        create_l2_adapter(_spec(tmp_path, {"type": "asym_k16_v8_v_only"}, read_also=[FP8]), l1)
    with pytest.raises(ValueError, match="split-tier"):
        create_l2_adapter(_spec(tmp_path, FP8, read_also=[{"type": "asym_k16_v8_v_only"}]), l1)


def test_read_also_processors_close_with_the_wrapper(tmp_path: Path, cache: Cache) -> None:
    keys = _keys(2)
    _fill(tmp_path, cache, FP8, keys)
    before = open_fds()
    wrapper = _open(tmp_path, cache.l1, FP8_ZSTD, read_also=[FP8, IDENTITY])
    status = wrapper.report_status()
    assert status["serde_read_also"] == ["fp8", "identity"]
    readers = [r.serde for r in wrapper.read_configs]
    hits, _ = cache.load(wrapper, keys, KV)
    assert hits.to_list() == [True, True]
    wrapper.close()
    assert all(r.closed is True for r in readers)
    assert open_fds() == before


def test_read_also_hits_are_exported_to_prometheus(tmp_path: Path, cache: Cache) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    from lmserde.l2.serde.prometheus_export import register_wrapper

    keys = _keys(3)
    _fill(tmp_path, cache, FP8, keys)
    registry = prometheus.CollectorRegistry()
    with _open(tmp_path, cache.l1, FP8_ZSTD, read_also=[FP8, IDENTITY]) as wrapper:
        register_wrapper(wrapper, name="kv", registry=registry)
        assert cache.load(wrapper, keys, KV)[0].to_list() == [True] * 3

        def value(read_config: str) -> float | None:
            return registry.get_sample_value(
                "lmserde_wrapper_load_hits_read_also_total",
                {"adapter": "kv", "serde": "fp8+zstd", "read_config": read_config})

        assert value("fp8") == 3.0
        assert value("identity") == 0.0  # listed, no hit yet: the series exists


LOSSLESS: list[Any] = [IDENTITY, {"type": "t_crc"}, {"type": "t_zlib"},
                       [{"type": "t_zlib"}, {"type": "t_crc"}]]
SMALL = MemoryLayoutDesc([[4, 2, 64]], [torch.bfloat16])


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writers=st.lists(st.integers(0, len(LOSSLESS) - 1), min_size=1, max_size=6),
       primary=st.integers(0, len(LOSSLESS) - 1),
       listed=st.sets(st.integers(0, len(LOSSLESS) - 1)))
def test_a_key_hits_exactly_when_its_writer_is_read(l1: L1Manager, writers: list[int],
                                                    primary: int, listed: set[int]) -> None:
    """Whatever mix of lossless configs wrote the tier: a key hits, bit-exact, exactly when the
    config that wrote it is the serde or in read_also; every other object stays on disk."""
    cache = Cache(l1)
    listed.discard(primary)
    keys = [key_of(i, salt="t") for i in range(len(writers))]
    originals = objects_for(SMALL, len(keys), seed=len(writers))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for key, original, writer in zip(keys, originals, writers):
            with _open(base, l1, LOSSLESS[writer]) as wrapper:
                assert cache.store(wrapper, [key], [original]).is_successful()
        with _open(base, l1, LOSSLESS[primary],
                   read_also=[LOSSLESS[i] for i in sorted(listed)]) as wrapper:
            hits, data = cache.load(wrapper, keys, SMALL)
            metrics = wrapper.metrics()
        readable = {primary} | listed
        assert hits.to_list() == [w in readable for w in writers]
        for hit, got, original in zip(hits.to_list(), data, originals):
            assert not hit or torch.equal(got, layout_bytes(original))
        assert metrics["load_hits_read_also"] == sum(w in listed for w in writers)
        assert metrics["repaired"] == 0
        assert all((base / key_file_name(k)).exists() for k in keys)


def _fs(base: Path, l1: L1Manager) -> Any:
    return create_l2_adapter({"type": "fs", "base_path": str(base)}, l1)


def test_a_read_also_serde_that_raises_is_contained(tmp_path: Path, l1: L1Manager,
                                                    cache: Cache) -> None:
    """The read_also config's deserializer raises SystemExit: a miss, kept, nothing crashes;
    once it decodes again the same objects hit."""
    keys = _keys(3)
    writer = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 1,
                                 serde_type="t_outage")
    with SerdeL2AdapterWrapper(_fs(tmp_path, l1), writer, l1) as wrapper:
        assert cache.store(wrapper, keys, objects_for(SMALL, 3)).is_successful()
    outage = OutageDeserializer()
    outage.down, outage.error = True, SystemExit(3)
    reader = AsyncSerdeProcessor(IdentitySerializer(), outage, 1, serde_type="t_outage")
    with SerdeL2AdapterWrapper(_fs(tmp_path, l1), make_processor("t_crc"), l1,
                               read_also=[(reader, "t_outage", SerdeSizeContract.EXACT)]
                               ) as wrapper:
        hits, _ = cache.load(wrapper, keys, SMALL)
        assert hits.to_list() == [False] * 3
        metrics = wrapper.metrics()
        assert metrics["failures"].get("deserialize") == 3 and metrics["repaired"] == 0
        assert all((tmp_path / key_file_name(k)).exists() for k in keys)
        outage.down = False
        hits, data = cache.load(wrapper, keys, SMALL)
        assert hits.to_list() == [True] * 3
        assert all(torch.equal(d, layout_bytes(o)) for d, o in zip(data, objects_for(SMALL, 3)))


def test_a_multi_output_read_also_config_fills_the_object_its_own_way(
        tmp_path: Path, cache: Cache) -> None:
    """t_kv3 maps its slots onto the object's groups; the tier now writes t_crc."""
    two_groups = MemoryLayoutDesc([[4, 64], [4, 64]], [torch.bfloat16, torch.bfloat16])
    keys = _keys(2)
    originals = objects_for(two_groups, 2)
    with _open(tmp_path, cache.l1, {"type": "t_kv3"}) as wrapper:
        assert cache.store(wrapper, keys, originals).is_successful()
    with _open(tmp_path, cache.l1, {"type": "t_crc"}, read_also=[{"type": "t_kv3"}]) as wrapper:
        hits, data = cache.load(wrapper, keys, two_groups)
    assert hits.to_list() == [True, True]
    assert all(torch.equal(d, layout_bytes(o)) for d, o in zip(data, originals))


def test_a_migration_beside_a_running_fleet_never_hands_out_wrong_bytes(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    """While the migration rewrites the tier, a fleet member (new config, read_also) keeps
    loading every key from another thread: each load sees the old object or the new one, whole
    (a hit with fp8's bytes), or, racing the replace (``fs`` sized the old file, then opened the
    new one), misses; nothing is refused as damage, nothing deleted, and afterwards all hit."""
    keys = _keys(12)
    _fill(tmp_path, cache, FP8, keys)
    _, fp8_bytes, _ = _load(tmp_path, cache, FP8, keys)
    done = threading.Event()
    rounds: list[list[bool]] = []
    mismatches: list[int] = []
    fleet = _open(tmp_path, l1, FP8_ZSTD, read_also=[FP8])

    def serve() -> None:
        while not done.is_set():
            hits, data = Cache(l1).load(fleet, keys, KV)
            rounds.append(hits.to_list())
            mismatches.extend(i for i, (a, b) in enumerate(zip(data, fp8_bytes))
                              if hits.test(i) and not torch.equal(a, b))

    server = threading.Thread(target=serve, name="fleet-member")
    server.start()
    try:
        with _open(tmp_path, l1, FP8_ZSTD, read_also=[FP8]) as migrator:
            report = migrate_adapter(migrator, batch=2)
    finally:
        done.set()
        server.join(timeout=60)
        fleet_metrics = fleet.metrics()
        fleet.close()
    assert len(report.migrated) == 12 and not report.failed
    assert rounds and mismatches == []
    assert fleet_metrics["repaired"] == 0
    assert not set(fleet_metrics["rejections"]) & {"format", "length", "checksum", "decode"}
    hits, data, _ = _load(tmp_path, cache, FP8_ZSTD, keys)
    assert all(hits) and all(torch.equal(a, b) for a, b in zip(data, fp8_bytes))


class _RefusingSubmits(AsyncSerdeProcessor):
    """A processor whose submit_deserialize raises (plugin code that fails before it starts)."""

    def submit_deserialize(self, *args: Any, **kwargs: Any) -> int:
        raise RuntimeError("worker pool gone")


def test_one_configs_failed_submit_leaves_the_others_hits(tmp_path: Path, l1: L1Manager,
                                                          cache: Cache) -> None:
    """One load task holds objects of two configs; the read_also one's submit raises: its keys
    miss (kept), the wrapper's own keys still hit."""
    old, new = _keys(2), _keys(2, start=5)
    with SerdeL2AdapterWrapper(_fs(tmp_path, l1), _processor_named("t_old"), l1) as wrapper:
        assert cache.store(wrapper, old, objects_for(SMALL, 2)).is_successful()
    reader = _RefusingSubmits(IdentitySerializer(), IdentityDeserializer(), 1, serde_type="t_old")
    with SerdeL2AdapterWrapper(_fs(tmp_path, l1), make_processor("t_crc"), l1,
                               read_also=[(reader, "t_old", SerdeSizeContract.EXACT)]
                               ) as wrapper:
        assert cache.store(wrapper, new, objects_for(SMALL, 2, seed=1)).is_successful()
        hits, data = cache.load(wrapper, old + new, SMALL)
        metrics = wrapper.metrics()
    assert hits.to_list() == [False, False, True, True]
    assert all(torch.equal(d, layout_bytes(o)) for d, o in zip(data[2:], objects_for(SMALL, 2, 1)))
    assert metrics["failures"]["deserialize_submit"] == 2 and metrics["repaired"] == 0
    assert all((tmp_path / key_file_name(k)).exists() for k in old)


def _processor_named(name: str) -> AsyncSerdeProcessor:
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 1, serde_type=name)


class _NoSizesAdapter(MemoryL2Adapter):
    adapter_type = "nosizes"

    def reports_object_sizes(self) -> bool:
        return False


def test_read_also_needs_an_adapter_that_reports_sizes(l1: L1Manager) -> None:
    """Without stored sizes a load could not size its buffer to whichever config wrote the
    object: refused at construction, naming the adapter."""
    inner, primary, reader = _NoSizesAdapter(), make_processor("t_crc"), make_processor("t_int8")
    try:
        with pytest.raises(ValueError, match="'read_also' needs an adapter that reports stored "
                                             "object sizes.*'nosizes'"):
            SerdeL2AdapterWrapper(inner, primary, l1,
                                  read_also=[(reader, "t_int8", SerdeSizeContract.EXACT)])
    finally:
        for closable in (inner, primary, reader):
            closable.close()


def test_the_migrate_report_speaks_to_the_operator(
        tmp_path: Path, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path, cache, FP8, _keys(3))
    _fill(tmp_path, cache, IDENTITY, _keys(1, start=9))
    spec = json.dumps(_spec(tmp_path, FP8_ZSTD, read_also=[FP8]))
    assert main(["scrub", spec, "--migrate"]) == 0
    out = capsys.readouterr().out
    assert "scanned 4 objects: 0 already in the current config, 3 in a read_also config; " \
           "migrated 3" in out
    assert "  config     1" in out  # the identity object's verdict
    assert "1 objects of configs not in read_also (or of other keys) were left as they are" in out
