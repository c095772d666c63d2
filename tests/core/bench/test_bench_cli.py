"""``lmserde bench`` end to end on a tiny configuration: JSON fields, consistency, output, errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lmserde.l2 import FRAME_HEADER_BYTES

Bench = Callable[..., tuple[int, str, str]]
BenchJson = Callable[..., dict[str, Any]]

TOP_FIELDS = {"schema_version", "lmserde_version", "source", "settings", "machine", "tiers",
              "results", "recommendations", "notes", "elapsed_seconds", "frame",
              "adapter_bandwidth", "policy"}
FRAME_FIELDS = {"serde", "bytes_per_object", "chunk_bytes", "rounds", "framed_ms", "unframed_ms",
                "overhead", "overhead_range", "paired_overhead", "paired_extra_ms",
                "pairs", "paired_extra_ms_interval", "paired_overhead_interval",
                "paired_interval_coverage", "within_noise",
                "framed_store_ms", "unframed_store_ms", "framed_load_ms", "unframed_load_ms",
                "cpu_overhead", "cpu_overhead_range", "framed_object_bytes",
                "unframed_object_bytes"}
SOURCE_FIELDS = {"kind", "model", "model_description", "model_layers", "seed", "layers_per_chunk",
                 "layer_ids", "tokens_per_chunk", "kv_heads", "head_dim", "dtype", "chunk_bytes",
                 "full_chunk_bytes", "chunks"}
SETTINGS_FIELDS = {"chunks", "repeat", "workers", "seed", "adapter", "queries_per_head",
                   "max_attn_error", "max_output_error", "lossless_only"}
RESULT_FIELDS = {"label", "config", "status", "ok", "error", "lossy", "size_contract", "chunk_form",
                 "raw_bytes_per_chunk", "stored_bytes_per_chunk", "compression_ratio",
                 "encode_gbps", "decode_gbps", "encode_ms_per_chunk", "decode_ms_per_chunk",
                 "codec_rounds", "encode_ms_rounds", "decode_ms_rounds",
                 "store_ms_p50", "load_ms_p50", "wrapper_stage_ms_p50", "quality", "acceptable",
                 "break_even_gbps", "tier_load_ms", "warnings", "placement", "l1_bytes_per_chunk",
                 "codec_interleaved"}
TENSOR_FIELDS = {"rel_mse", "cosine", "max_abs_err", "bit_exact", "nonfinite"}
QUALITY_FIELDS = {"keys", "values", "overall", "attn_logit_rel_err", "attn_logit_max_abs_err",
                  "attn_weight_tv", "attn_weight_max_abs_err", "attn_output_rel_err",
                  "queries_per_head", "bit_exact"}
RECOMMENDATION_FIELDS = {"tier", "gbps", "serde", "load_ms", "raw_load_ms", "speedup_vs_raw", "text",
                         "within_noise"}


def _result(report: dict[str, Any], label: str) -> dict[str, Any]:
    matches = [r for r in report["results"] if r["label"] == label]
    assert len(matches) == 1, [r["label"] for r in report["results"]]
    return matches[0]


def _check_consistent(report: dict[str, Any], row: dict[str, Any]) -> None:
    """Every measured number agrees with the others and with the source."""
    assert set(row) == RESULT_FIELDS
    assert row["ok"] and row["status"] == "ok" and row["error"] is None
    raw = report["source"]["chunk_bytes"]
    assert row["raw_bytes_per_chunk"] == raw
    assert row["stored_bytes_per_chunk"] > 0
    assert row["compression_ratio"] == pytest.approx(raw / row["stored_bytes_per_chunk"])
    for direction in ("encode", "decode"):
        gbps, ms = row[f"{direction}_gbps"], row[f"{direction}_ms_per_chunk"]
        assert gbps > 0 and ms > 0
        assert gbps * 1e9 * ms / 1e3 == pytest.approx(raw, rel=1e-6)
    assert report["settings"]["repeat"] <= row["codec_rounds"] <= 50
    assert row["store_ms_p50"] > 0 and row["load_ms_p50"] > 0
    assert set(row["wrapper_stage_ms_p50"]) == {"serialize", "inner_store", "inner_load",
                                                 "deserialize"}
    q = row["quality"]
    assert set(q) == QUALITY_FIELDS
    for part in ("keys", "values", "overall"):
        assert set(q[part]) == TENSOR_FIELDS
        assert -1.0 <= q[part]["cosine"] <= 1.0 + 1e-9
    assert q["bit_exact"] == (q["keys"]["bit_exact"] and q["values"]["bit_exact"])
    assert 0.0 <= q["attn_weight_tv"] <= 1.0
    assert q["queries_per_head"] == report["settings"]["queries_per_head"]
    decode_s = row["decode_ms_per_chunk"] / 1e3
    saved = raw - row["stored_bytes_per_chunk"]
    expected_be = max(saved, 0) / decode_s / 1e9
    assert row["break_even_gbps"] == pytest.approx(expected_be)
    assert set(row["tier_load_ms"]) == {t["name"] for t in report["tiers"]}
    for tier in report["tiers"]:
        expected = (row["stored_bytes_per_chunk"] / (tier["gbps"] * 1e9) + decode_s) * 1e3
        assert row["tier_load_ms"][tier["name"]] == pytest.approx(expected)


def test_identity_json_has_every_field_and_is_bit_exact_with_only_the_frame_added(
    bench_json: BenchJson
) -> None:
    report = bench_json("--serde", "identity")
    assert set(report) == TOP_FIELDS
    assert report["schema_version"] == 1
    source = report["source"]
    assert set(source) == SOURCE_FIELDS
    assert source["kind"] == "synthetic" and source["model"] == "tiny"
    assert source["chunk_bytes"] == (2 * source["layers_per_chunk"] * source["tokens_per_chunk"]
                                     * source["kv_heads"] * source["head_dim"] * 2)
    assert source["layer_ids"][0] == 0 and source["layer_ids"][-1] == source["model_layers"] - 1
    assert set(report["settings"]) == SETTINGS_FIELDS
    assert report["settings"]["adapter"] == {"type": "fs", "base_path": "<temporary directory>"}
    assert report["settings"]["chunks"] == 2 and report["settings"]["repeat"] == 1
    assert {"cpus", "torch_threads", "torch", "python", "platform"} <= set(report["machine"])
    assert [t["name"] for t in report["tiers"]] == ["NVMe", "network storage", "object store"]
    row = _result(report, "identity")
    _check_consistent(report, row)
    assert row["config"] == {"type": "identity", "max_workers": 1}
    # identity stores the chunk's own bytes behind the 64-byte stored-object frame header, so
    # the stored-byte ratio is just under 1 ...
    stored = source["chunk_bytes"] + FRAME_HEADER_BYTES
    assert row["stored_bytes_per_chunk"] == stored
    assert row["compression_ratio"] == pytest.approx(source["chunk_bytes"] / stored)
    assert row["compression_ratio"] < 1.0
    # ... and the frame's share, reported on its own, leaves the serde's bytes at exactly 1.0x
    frame = report["frame"]
    assert set(frame) == FRAME_FIELDS and frame["serde"] == "identity"
    assert frame["bytes_per_object"] == FRAME_HEADER_BYTES
    assert source["chunk_bytes"] / (row["stored_bytes_per_chunk"] - frame["bytes_per_object"]) == 1.0
    assert frame["framed_ms"] > 0 and frame["unframed_ms"] > 0
    assert frame["overhead"] == pytest.approx(frame["framed_ms"] / frame["unframed_ms"] - 1.0)
    # measured on full-size chunks of the model (the sampled layers' bytes repeated), paired
    assert frame["chunk_bytes"] == source["full_chunk_bytes"] and frame["rounds"] >= 5
    assert row["lossy"] is False and row["size_contract"] == "exact"
    assert row["chunk_form"].startswith("single group")
    q = row["quality"]
    assert q["bit_exact"] and q["overall"]["rel_mse"] == 0.0 and q["overall"]["max_abs_err"] == 0.0
    assert q["overall"]["cosine"] == pytest.approx(1.0)
    assert q["attn_weight_tv"] == 0.0 and q["attn_logit_rel_err"] == 0.0
    assert q["attn_output_rel_err"] == 0.0
    assert row["acceptable"] and row["break_even_gbps"] == 0.0
    recs = report["recommendations"]
    assert [r["tier"] for r in recs] == [t["name"] for t in report["tiers"]]
    for rec in recs:
        assert set(rec) == RECOMMENDATION_FIELDS
        assert rec["serde"] is None and rec["speedup_vs_raw"] == 1.0  # identity never beats raw
        assert rec["raw_load_ms"] == pytest.approx(source["chunk_bytes"] / (rec["gbps"] * 1e9) * 1e3)


def test_multi_lossy_and_upper_bound_serdes_are_measured_consistently(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_kvgroups", "bench_halfbyte", "bench_upper")
    report = bench_json("--serde", "bench_kvgroups", "--serde", "bench_halfbyte",
                        "--serde", "bench_upper")
    raw = report["source"]["chunk_bytes"]
    groups = _result(report, "bench_kvgroups")
    _check_consistent(report, groups)
    assert groups["chunk_form"].startswith("two groups") and groups["quality"]["bit_exact"]
    half = _result(report, "bench_halfbyte")
    _check_consistent(report, half)
    # half of the raw bytes plus the frame header per stored chunk
    assert half["stored_bytes_per_chunk"] == raw // 2 + FRAME_HEADER_BYTES
    assert half["compression_ratio"] == pytest.approx(raw / (raw // 2 + FRAME_HEADER_BYTES))
    assert half["lossy"] is True
    assert not half["quality"]["bit_exact"] and half["quality"]["overall"]["rel_mse"] > 0
    assert half["break_even_gbps"] > 0  # it halves the bytes, so it wins on a slow enough tier
    upper = _result(report, "bench_upper")
    _check_consistent(report, upper)
    assert upper["size_contract"] == "upper_bound"
    # the narrowed size (payload raw + 4, plus the frame header), not the estimate
    assert upper["stored_bytes_per_chunk"] == raw + 4 + FRAME_HEADER_BYTES
    assert upper["quality"]["bit_exact"] and upper["break_even_gbps"] == 0.0


def test_lossy_serde_over_the_quality_bar_is_never_recommended(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_halfbyte")
    report = bench_json("--serde", "bench_halfbyte", "--tier", "slow=0.000001",
                        "--max-attn-error", "0")
    row = _result(report, "bench_halfbyte")
    assert row["quality"]["attn_weight_tv"] > 0 and not row["acceptable"]
    assert report["recommendations"][0]["serde"] is None
    report = bench_json("--serde", "bench_halfbyte", "--tier", "slow=0.000001",
                        "--max-attn-error", "100")
    assert not _result(report, "bench_halfbyte")["acceptable"]  # the output error is still too large
    report = bench_json("--serde", "bench_halfbyte", "--tier", "slow=0.000001",
                        "--max-attn-error", "100", "--max-output-error", "1e9")
    assert _result(report, "bench_halfbyte")["acceptable"]
    rec = report["recommendations"][0]
    assert rec["tier"] == "slow" and rec["serde"] == "bench_halfbyte" and rec["speedup_vs_raw"] > 1
    report = bench_json("--serde", "bench_halfbyte", "--tier", "slow=0.000001",
                        "--max-attn-error", "100", "--max-output-error", "1e9", "--lossless-only")
    assert report["recommendations"][0]["serde"] is None


def test_default_run_measures_every_installed_serde(bench_json: BenchJson) -> None:
    from lmserde.registry import list_serdes

    report = bench_json()
    labels = [r["label"] for r in report["results"]]
    assert labels[0] == "identity"  # the baseline comes first
    for row in report["results"]:
        if row["ok"]:
            _check_consistent(report, row)
        else:
            assert row["error"]
    for info in list_serdes():
        covered = any(label == info.name or label.startswith(f"{info.name}:") for label in labels)
        noted = any(note.startswith(f"{info.name}:") for note in report["notes"])
        assert covered or noted, info.name


def test_failing_serde_is_reported_and_the_others_still_run(
    bench: Bench, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_broken")
    code, out, err = bench("--json", "--serde", "bench_broken", "--serde", "identity")
    assert code == 1  # a requested serde failed
    report = json.loads(out)
    broken = _result(report, "bench_broken")
    assert broken["status"] == "error" and not broken["ok"]
    assert "bench_broken always fails" in broken["error"]
    # the processor's log line is collected with the serde, not printed over the progress bars
    assert any(w.startswith("log warning lmserde.processor:") and "bench_broken always fails" in w
               for w in broken["warnings"])
    assert "bench_broken always fails" not in err
    assert _result(report, "identity")["ok"]


def test_warnings_of_a_serde_are_reported_not_printed(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_warns")
    report = bench_json("--serde", "bench_warns")
    row = _result(report, "bench_warns")
    assert row["ok"] and row["warnings"] == ["UserWarning: bench_warns: this layout is stored raw"]
    assert "bench_warns: UserWarning: bench_warns: this layout is stored raw" in report["notes"]


def test_rich_progress_reports_each_phase() -> None:
    rich_console = pytest.importorskip("rich.console")
    import io

    from lmserde.bench.progress import RichProgress

    buffer = io.StringIO()
    console = rich_console.Console(file=buffer, force_terminal=False, width=100)
    with RichProgress(console) as progress:
        progress.begin("identity", 3)
        progress.advance()
        progress.advance(2)
        progress.end()
        progress.begin("fp8", 5)
        progress.end()  # an early end (a failed serde) completes the bar
    text = buffer.getvalue()
    assert "identity" in text and "3/3" in text and "fp8" in text and "5/5" in text


def test_split_tier_serde_runs_with_k_in_l1(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    """A V-only serde runs in split-tier placement: K stays in L1, V goes to L2, both are
    reported, the round trip is exact (K from L1, V exact), and it is never recommended."""
    test_serdes("bench_vonly")
    report = bench_json("--serde", "bench_vonly", "--serde", "identity")
    row = _result(report, "bench_vonly")
    assert row["ok"] and row["placement"] == "kv_split_tier"
    raw = report["source"]["chunk_bytes"]
    assert row["l1_bytes_per_chunk"] == raw / 2
    assert row["stored_bytes_per_chunk"] == raw / 2 + FRAME_HEADER_BYTES
    assert row["quality"]["bit_exact"]
    assert _result(report, "identity")["placement"] == "kv_together"
    assert all(r["serde"] != "bench_vonly" for r in report["recommendations"])
    assert any(n.startswith("bench_vonly: split-tier placement — keeps") for n in report["notes"])


def test_chains_and_adapter_specs_run_through_the_wrapper(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_halfbyte")
    chain = '[{"type": "bench_halfbyte"}, {"type": "identity"}]'
    report = bench_json("--serde", chain, "--adapter", '{"type": "memory"}')
    assert report["settings"]["adapter"] == {"type": "memory"}
    row = _result(report, "bench_halfbyte+identity")
    _check_consistent(report, row)
    raw = report["source"]["chunk_bytes"]
    # one frame per stored object, however many serdes the chain has
    assert row["stored_bytes_per_chunk"] == raw // 2 + FRAME_HEADER_BYTES
    assert row["compression_ratio"] == pytest.approx(raw / (raw // 2 + FRAME_HEADER_BYTES))
    assert row["lossy"] is True
    assert row["config"] == [{"type": "bench_halfbyte", "max_workers": 1},
                             {"type": "identity", "max_workers": 1}]


def test_load_misses_make_the_serde_fail_with_a_reason(bench: Bench) -> None:
    adapter = '{"type": "fault", "inner": {"type": "memory"}, "load_miss_rate": 1.0}'
    code, out, _ = bench("--json", "--serde", "identity", "--adapter", adapter)
    assert code == 1
    row = json.loads(out)["results"][0]
    assert row["status"] == "error" and "missed" in row["error"]


def test_declared_options_are_completed_for_the_run(
    bench_json: BenchJson, test_serdes: Callable[..., None]
) -> None:
    from bench_test_serdes import OPTIONS_SEEN

    test_serdes("bench_options")
    OPTIONS_SEEN.clear()
    report = bench_json("--serde", "bench_options", "--workers", "2")
    seen = OPTIONS_SEEN[-1]
    assert seen["max_workers"] == 2
    assert seen["head_dim"] == report["source"]["head_dim"]
    assert seen["skip_first_layers"] == 2 and seen["skip_last_layers"] == 2  # tiny: all layers
    row = _result(report, "bench_options")
    assert row["ok"] and row["config"]["master_key_path"] == "<throwaway key>"
    assert not Path(seen["master_key_path"]).exists()  # removed with the run's directory
    assert any("throwaway" in note for note in report["notes"])
    OPTIONS_SEEN.clear()
    report = bench_json("--serde", "bench_options", "--layers", "2")
    assert OPTIONS_SEEN[-1]["skip_first_layers"] == 0 and OPTIONS_SEEN[-1]["skip_last_layers"] == 0
    assert report["source"]["layers_per_chunk"] == 2
    assert any("--layers all" in note for note in report["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--serde", "no_such_serde"], "Unknown serde type 'no_such_serde'"),
        (["--serde", '{"type": "identity"'], "not valid JSON"),
        (["--serde", '{"type": "identity", "max_wrokers": 2}'], "Unknown option 'max_wrokers'"),
        (["--serde", '{"type": "identity", "max_workers": 0}'], "max_workers"),
        (["--serde", '{"no_type": 1}'], "needs a 'type' field"),
        (["--serde", "[]"], "at least one serde"),
        (["--serde", "fp8 please"], "neither a serde type name nor a JSON object"),
        (["--adapter", '{"type": "nope"}'], "Unknown L2 adapter type 'nope'"),
        (["--adapter", "{nope"], "--adapter '{nope' is not valid JSON"),
        (["--adapter", '{"type": "fs", "bsae_path": "/tmp"}'], "Unknown option 'bsae_path'"),
        (["--adapter", '{"type": "memory", "serde": {"type": "identity"}}'], "must not contain 'serde'"),
        (["--adapter", "[1, 2]"], "must be a JSON object"),
        (["--kv", "/nonexistent/kv.safetensors"], "--kv file not found"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(bench: Bench, args: list[str], message: str) -> None:
    code, out, err = bench(*args, model=None if args[0] == "--kv" else "tiny")  # --kv replaces it
    assert code == 2
    assert message in err
    assert err.startswith("lmserde bench: error: ")
    assert out == ""


@pytest.mark.parametrize("args", [["--chunks", "0"], ["--repeat", "x"], ["--tier", "nvme"],
                                  ["--model", "gpt-9"], ["--max-attn-error", "-1"]])
def test_bad_numbers_exit_2(bench: Bench, args: list[str]) -> None:
    code, _, err = bench(*args, model=None)
    assert code == 2
    assert "error" in err


def test_plot_writes_a_png(bench: Bench, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "bench.png"
    code, out, _ = bench("--serde", "identity", "--plot", str(target))
    assert code == 0
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"IEND" in data[-16:]
    assert f"plot written to {target}" in out


def test_plot_without_matplotlib_exits_2_before_running(
    bench: Bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lmserde.bench.plot as plot

    monkeypatch.setattr(plot.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else __import__("importlib")
                        .machinery.PathFinder.find_spec(name))
    code, out, err = bench("--serde", "identity", "--plot", str(tmp_path / "x.png"))
    assert code == 2
    assert "--plot needs matplotlib" in err and "pip install" in err
    assert not (tmp_path / "x.png").exists() and out == ""


def test_table_output_with_rich(bench: Bench) -> None:
    pytest.importorskip("rich")
    code, out, _ = bench("--serde", "identity")
    assert code == 0
    assert "lmserde bench" in out and "identity" in out and "break-even" in out
    assert "NVMe (3 GB/s)" in out and "object store (100 MB/s)" in out


def test_plain_output_without_rich(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    import lmserde.cli.bench_command as command

    monkeypatch.setattr(command, "_has_rich", lambda: False)
    code, out, _ = bench("--serde", "identity")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("serde"))
    assert "ratio" in header and "attn w err" in header and "attn out err" in header
    assert "break-even" in header
    row = next(line for line in lines if line.startswith("identity "))
    assert "1.00x" in row and "exact" in row and "never" in row
    assert "install rich" in out


def test_kv_file_source(bench: Bench, tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1)
    keys = torch.randn(3, 40, 2, 16, generator=g).to(torch.float16)
    values = torch.randn(3, 40, 2, 16, generator=g).to(torch.float16)
    path = tmp_path / "kv.safetensors"
    save_file({"keys": keys, "values": values}, str(path))
    code, out, err = bench("--json", "--kv", str(path), "--tokens", "16", "--chunks", "5",
                           "--serde", "identity", model=None)
    assert code == 0, err
    report = json.loads(out)
    source = report["source"]
    assert source["kind"] == "file" and source["path"] == str(path)
    assert source["file_layers"] == 3 and source["file_tokens"] == 40
    assert source["chunks"] == 2  # 40 tokens hold two 16-token chunks
    assert source["dtype"] == "float16" and source["head_dim"] == 16
    assert source["chunk_bytes"] == 2 * 3 * 16 * 2 * 16 * 2
    assert any("holds 2 chunk(s)" in n for n in report["notes"])
    row = _result(report, "identity")
    _check_consistent(report, row)
    assert row["quality"]["bit_exact"]


def test_parser_imports_neither_torch_nor_plugins() -> None:
    code = ("import sys\n"
            "from lmserde.cli.main import build_parser\n"
            "build_parser(with_plugin_commands=False).parse_args(['bench', '--help'])\n")
    proc = subprocess.run([sys.executable, "-c", code + "", ], capture_output=True, text=True)
    assert proc.returncode == 0 and "--serde" in proc.stdout
    check = ("import sys\n"
             "from lmserde.cli.main import build_parser\n"
             "build_parser(with_plugin_commands=False)\n"
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('lmserde_')))\n")
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_json_is_strict(bench_json: BenchJson) -> None:
    report = bench_json("--serde", "identity")

    def finite(value: Any) -> None:
        if isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, dict):
            for v in value.values():
                finite(v)
        elif isinstance(value, list):
            for v in value:
                finite(v)

    finite(report)
    json.dumps(report, allow_nan=False)


def test_an_unframed_adapter_spec_stores_raw_serde_bytes(bench_json: BenchJson) -> None:
    """``"serde_frame": false`` (LMCache-shared mode) is accepted and measured as such."""
    report = bench_json("--serde", "identity", "--adapter",
                        '{"type": "memory", "serde_frame": false}')
    (row,) = report["results"]
    assert row["stored_bytes_per_chunk"] == report["source"]["chunk_bytes"]
    assert report["frame"] is None  # nothing to compare: the run stores no frames
    assert report["settings"]["adapter"]["serde_frame"] is False
