"""``lmserde scrub``: walks an adapter's objects, verifies frames, reports and optionally deletes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    ObjectKey,
    create_serde_processor,
)
from lmserde.cli.main import main
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    FSL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    scrub_adapter,
)
from lmserde.spec import SerdeSizeContract
from toy_serdes import OutageDeserializer

KV = MemoryLayoutDesc([[4, 2, 64]], [torch.bfloat16])


def _spec(base: Path, **extra: object) -> dict:
    return {"type": "fs", "base_path": str(base), "serde": {"type": "identity"}, **extra}


def _fill(base: Path, l1: L1Manager, cache: Cache, n: int = 6) -> list:
    keys = [key_of(i, salt="tenant") for i in range(n)]
    wrapper = create_l2_adapter(_spec(base), l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, n)).is_successful()
    finally:
        wrapper.close()
    return keys


def _damage(base: Path, keys: list) -> None:
    flipped = base / key_file_name(keys[1])
    data = bytearray(flipped.read_bytes())
    data[FRAME_HEADER_BYTES + 3] ^= 0x20
    flipped.write_bytes(bytes(data))
    (base / key_file_name(keys[4])).write_bytes(b"not a frame at all")


def _scrub_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["scrub", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_scrub_reports_damage_by_reason_and_deletes_on_request(
        tmp_path: Path, l1: L1Manager, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    keys = _fill(tmp_path, l1, cache)
    _damage(tmp_path, keys)
    spec = json.dumps(_spec(tmp_path))
    code, report = _scrub_json(capsys, spec)
    assert code == 1
    assert report["scanned"] == 6 and report["ok"] == 4
    assert report["verdicts"] == {"checksum": 1, "format": 1, "ok": 4}
    assert {d["chunk_hash"] for d in report["damaged"]} == {keys[1].chunk_hash.hex(),
                                                             keys[4].chunk_hash.hex()}
    assert report["deleted"] == 0
    assert (tmp_path / key_file_name(keys[1])).exists()  # looking never deletes

    code, report = _scrub_json(capsys, spec, "--delete")
    assert code == 1 and report["deleted"] == 2
    assert not (tmp_path / key_file_name(keys[1])).exists()
    assert not (tmp_path / key_file_name(keys[4])).exists()
    code, report = _scrub_json(capsys, spec, "--decode")
    assert code == 0 and report["verdicts"] == {"ok": 4}


def test_scrub_detects_a_config_change_and_decodes(tmp_path: Path, l1: L1Manager, cache: Cache,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lmserde_fp8")
    keys = [key_of(i) for i in range(3)]
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "fp8"}}, l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
    finally:
        wrapper.close()
    same = json.dumps({"type": "fs", "base_path": str(tmp_path), "serde": {"type": "fp8"}})
    assert _scrub_json(capsys, same, "--decode") == (0, _scrub_json(capsys, same, "--decode")[1])
    other = json.dumps({"type": "fs", "base_path": str(tmp_path),
                        "serde": {"type": "fp8", "fp8_dtype": "float8_e5m2"}})
    # issue 27: objects of another config are someone else's, not damage: reported apart,
    # exit 0, kept by --delete, removed only by --delete-foreign
    code, report = _scrub_json(capsys, other)
    assert code == 0 and report["verdicts"] == {"config": 3}
    assert report["damaged"] == [] and len(report["foreign"]) == 3
    code, report = _scrub_json(capsys, other, "--delete")
    assert code == 0 and report["deleted"] == 0 and report["foreign_deleted"] == 0
    assert all((tmp_path / key_file_name(k)).exists() for k in keys)
    code, report = _scrub_json(capsys, other, "--delete-foreign")
    assert code == 0 and report["foreign_deleted"] == 3
    assert not any((tmp_path / key_file_name(k)).exists() for k in keys)


def test_scrub_refuses_unframed_specs_and_bad_json(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scrub", json.dumps(_spec(tmp_path, serde_frame=False))]) == 2
    assert "serde_frame" in capsys.readouterr().err
    assert main(["scrub", "{not json"]) == 2
    assert main(["scrub", json.dumps({"type": "fs", "base_path": str(tmp_path)})]) == 2
    assert "serde" in capsys.readouterr().err


def test_scrub_reads_the_spec_from_a_file_and_prints_a_summary(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    keys = _fill(base, l1, cache, n=3)
    _damage(base, keys + [key_of(99)] * 2)  # flips keys[1]; a foreign file under key_of(99)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(_spec(base)))
    proc = subprocess.run([sys.executable, "-m", "lmserde.cli.main", "scrub", f"@{spec_file}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "scanned 4 objects: 2 ok, 2 damaged" in proc.stdout
    assert "checksum" in proc.stdout and "--delete" in proc.stdout


def test_scrub_adapter_api_counts_progress(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    keys = _fill(tmp_path, l1, cache, n=5)
    _damage(tmp_path, keys)
    wrapper = create_l2_adapter(_spec(tmp_path), l1, repair=False)
    seen: list[int] = []
    try:
        report = scrub_adapter(wrapper, batch=2, on_progress=seen.append)
    finally:
        wrapper.close()
    assert seen == [2, 2, 1]
    assert report.found_damage and len(report.damaged) == 2 and report.deleted == 0


def test_scrub_reports_an_oversized_object_without_reading_it(
        tmp_path: Path, l1: L1Manager, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    """A huge (here sparse: 1 TiB) file at a key's path is ``length`` damage; no buffer of its size
    is ever allocated, whatever the machine's memory."""
    keys = _fill(tmp_path, l1, cache, n=3)
    with open(tmp_path / key_file_name(keys[2]), "r+b") as f:
        f.truncate(1 << 40)
    code, report = _scrub_json(capsys, json.dumps(_spec(tmp_path)))
    assert code == 1 and report["verdicts"] == {"length": 1, "ok": 2}
    assert report["damaged"][0]["chunk_hash"] == keys[2].chunk_hash.hex()
    small = KV.nbytes + FRAME_HEADER_BYTES
    code, report = _scrub_json(capsys, json.dumps(_spec(tmp_path)), "--max-object-bytes",
                               str(small - 1))
    assert report["verdicts"] == {"length": 3}
    wrapper = create_l2_adapter(_spec(tmp_path), l1, repair=False)
    try:
        with pytest.raises(ValueError, match="max_object_bytes"):
            scrub_adapter(wrapper, max_object_bytes=8)
    finally:
        wrapper.close()


@pytest.mark.parametrize(("error", "verdict", "deleted"), [
    (ConnectionError("kms down"), "unverified", 0),  # not about the bytes: kept
    (ValueError("not a frame of mine"), "decode", 3),  # the serde's verdict on the bytes
], ids=["outage", "bad bytes"])
def test_scrub_decode_deletes_only_what_the_wrapper_refuses(
        error: BaseException, verdict: str, deleted: int, tmp_path: Path, l1: L1Manager,
        cache: Cache) -> None:
    """With ``--decode --delete`` during a key-service outage nothing is deleted: a decode that
    fails for a reason other than the bytes is ``unverified``, not damage."""
    decoder = OutageDeserializer()
    inner = FSL2Adapter(tmp_path)
    wrapper = SerdeL2AdapterWrapper(inner, AsyncSerdeProcessor(IdentitySerializer(), decoder), l1,
                                    size_contract=SerdeSizeContract.EXACT, repair=False)
    keys = [key_of(i) for i in range(3)]
    with wrapper:
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        decoder.down, decoder.error = True, error
        report = scrub_adapter(wrapper, decode=True, delete=True)
        assert report.verdicts == {verdict: 3}
        assert report.found_damage == (verdict != "unverified")
        assert report.deleted == deleted
        assert len(inner.get_object_sizes(keys)) == 3 - deleted
        decoder.down = False
        if not deleted:
            assert scrub_adapter(wrapper, decode=True).verdicts == {"ok": 3}


def test_a_rejection_listener_hears_refused_keys_until_unregistered(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    keys = _fill(tmp_path, l1, cache, n=5)[:3]
    _damage(tmp_path, keys + [key_of(99)] * 2)  # keys[1]: a flipped payload bit

    class Heard:
        def __init__(self) -> None:
            self.calls: list[tuple[str, list]] = []

        def on_l2_keys_rejected(self, reason: str, rejected: list) -> None:
            self.calls.append((reason, rejected))

    heard = Heard()
    wrapper = create_l2_adapter(_spec(tmp_path), l1, repair=False)
    try:
        wrapper.register_listener(heard)
        assert cache.load(wrapper, keys, KV)[0].to_list() == [True, False, True]
        assert heard.calls == [("checksum", [keys[1]])]
        wrapper.unregister_listener(heard)
        wrapper.unregister_listener(heard)  # a no-op the second time
        assert cache.load(wrapper, keys, KV)[0].to_list() == [True, False, True]
        assert len(heard.calls) == 1
    finally:
        wrapper.close()


def test_scrub_exits_3_when_objects_could_not_be_verified(
        tmp_path: Path, l1: L1Manager, cache: Cache, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from lmserde.l2.serde import scrub

    keys = _fill(tmp_path, l1, cache, n=2)

    def outage(wrapper: object, **kwargs: object) -> scrub.ScrubReport:
        report = scrub.ScrubReport()
        report.add(keys[0], "ok")
        report.add(keys[1], "unverified")
        return report

    monkeypatch.setattr(scrub, "scrub_adapter", outage)
    assert main(["scrub", json.dumps(_spec(tmp_path)), "--decode"]) == 3
    out = capsys.readouterr().out
    assert "1 objects could not be verified" in out and "kept" in out


def test_an_object_gone_between_its_frame_check_and_its_decode_is_missing(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    class VanishingFS(FSL2Adapter):
        """Another process deletes each object after scrub read its frame, before the decode."""

        def __init__(self, base: Path) -> None:
            super().__init__(base)
            self.loads: dict[ObjectKey, int] = {}

        def submit_load_task(self, keys, objects):  # type: ignore[no-untyped-def]
            for key in keys:
                self.loads[key] = self.loads.get(key, 0) + 1
            gone = [key for key in keys if self.loads[key] == 2]
            if gone:
                self.delete(gone)
            return super().submit_load_task(keys, objects)

    keys = [key_of(i) for i in range(2)]
    wrapper = SerdeL2AdapterWrapper(VanishingFS(tmp_path),
                                    AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer()),
                                    l1, size_contract=SerdeSizeContract.EXACT, repair=False)
    with wrapper:
        assert cache.store(wrapper, keys, objects_for(KV, 2)).is_successful()
        report = scrub_adapter(wrapper, keys=keys, decode=True)
    assert report.verdicts == {"missing": 2} and not report.found_damage


def test_scrub_decodes_in_groups_that_fit_l1_and_skips_what_cannot(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    keys = _fill(tmp_path, l1, cache, n=6)
    need = KV.nbytes + FRAME_HEADER_BYTES
    for capacity, verdicts in ((need * 2 + need // 2, {"ok": 6}),  # 3 groups of 2
                               (need - 1, {"unverified": 6})):  # no object fits
        wrapper = create_l2_adapter(_spec(tmp_path), L1Manager(capacity), repair=False)
        try:
            report = scrub_adapter(wrapper, keys=keys, decode=True, delete=True)
        finally:
            wrapper.close()
        assert report.verdicts == verdicts and report.deleted == 0


def test_an_adapter_that_cannot_say_sizes_leaves_objects_unverified(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    class SizelessFS(FSL2Adapter):
        def get_object_sizes(self, keys):  # type: ignore[no-untyped-def]
            raise OSError(5, "EIO")

    keys = _fill(tmp_path, l1, cache, n=3)
    sizeless = SerdeL2AdapterWrapper(SizelessFS(tmp_path), create_serde_processor({"type": "identity"}),
                                     l1, repair=False)
    try:
        report = scrub_adapter(sizeless, keys=keys, delete=True)
    finally:
        sizeless.close()
    assert report.verdicts == {"unverified": 3} and report.deleted == 0
    assert all((tmp_path / key_file_name(key)).exists() for key in keys)


def test_payloads_only_a_decode_checks_are_unchecked_without_decode(
        tmp_path: Path, l1: L1Manager, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    """aesgcm frame v3 authenticates its payload, so its frames carry no checksum: a scrub
    without ``--decode`` must not call such an object ``ok`` (a flipped ciphertext byte passes
    every frame check); ``--decode`` authenticates it and finds the damage."""
    pytest.importorskip("lmserde_aesgcm")
    key_file = tmp_path / "master.key"
    key_file.write_bytes(bytes(range(32)))
    key_file.chmod(0o600)
    base = tmp_path / "tier"
    spec = {"type": "fs", "base_path": str(base),
            "serde": {"type": "aesgcm", "master_key_path": str(key_file), "frame_version": 3}}
    keys = [key_of(i, salt="tenant") for i in range(3)]
    wrapper = create_l2_adapter(spec, l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
    finally:
        wrapper.close()
    flipped = base / key_file_name(keys[1])
    data = bytearray(flipped.read_bytes())
    data[FRAME_HEADER_BYTES + 40] ^= 0x01  # inside the ciphertext
    flipped.write_bytes(bytes(data))

    code, report = _scrub_json(capsys, json.dumps(spec))
    assert code == 0 and report["verdicts"] == {"unchecked": 3} and report["ok"] == 0
    assert main(["scrub", json.dumps(spec)]) == 0
    assert "3 objects were checked by their frame only" in capsys.readouterr().out
    code, report = _scrub_json(capsys, json.dumps(spec), "--decode")
    assert code == 1 and report["verdicts"] == {"ok": 2, "decode": 1}
    assert [d["chunk_hash"] for d in report["damaged"]] == [keys[1].chunk_hash.hex()]


def test_an_object_written_for_another_key_is_reported_apart_and_kept(
        tmp_path: Path, l1: L1Manager, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27: ``key`` (like ``config`` and ``foreign``) is someone else's object, not damage:
    listed under ``foreign``, exit 0, kept by ``--delete``."""
    keys = _fill(tmp_path, l1, cache, n=2)
    moved = key_of(7, salt="tenant")
    (tmp_path / key_file_name(moved)).write_bytes((tmp_path / key_file_name(keys[0])).read_bytes())
    spec = json.dumps(_spec(tmp_path))
    code, report = _scrub_json(capsys, spec, "--delete")
    assert code == 0 and report["verdicts"] == {"key": 1, "ok": 2}
    assert [d["chunk_hash"] for d in report["foreign"]] == [moved.chunk_hash.hex()]
    assert report["damaged"] == [] and report["deleted"] == 0
    assert (tmp_path / key_file_name(moved)).exists()
