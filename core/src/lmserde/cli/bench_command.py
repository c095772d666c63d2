"""``lmserde bench``: which serde should my L2 tier use?

Measures every installed serde (or the ``--serde`` ones) through the real data path on realistic
KV chunks and prints size, speed, quality, break-even bandwidth and a recommendation per storage
tier. Building the parser imports neither torch nor any plugin (``lmserde plugins`` stays light).
Bad input (an unknown serde type or option, invalid JSON, a missing optional package) exits 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from lmserde.bench.breakeven import DEFAULT_TIERS, parse_bandwidth, parse_tier
from lmserde.bench.model_shapes import BUILTIN_MODELS, DEFAULT_MODEL
from lmserde.bench.recommend import DEFAULT_MAX_ATTN_ERROR, DEFAULT_MAX_OUTPUT_ERROR
from lmserde.bench.run_defaults import (
    DEFAULT_CHUNKS,
    DEFAULT_LAYERS,
    DEFAULT_QUERIES,
    DEFAULT_REPEAT,
    DEFAULT_WORKERS,
)
from lmserde.bench.serde_selection import BenchInputError
from lmserde.cli.exit_codes import EXIT_USAGE

__all__ = ["add_parser", "run", "EXIT_USAGE", "EXIT_FAILED"]

#: A serde named with --serde failed, or no serde could be measured.
EXIT_FAILED = 1

_EXAMPLES = """\
examples:
  lmserde bench                                   every installed serde, Llama-3-8B-like KV
  lmserde bench --model qwen2.5-7b --serde fp8 --serde asym_k16_v8
  lmserde bench --serde '{"type": "fp8", "fp8_dtype": "float8_e5m2"}'
  lmserde bench --serde '[{"type": "fp8"}, {"type": "aesgcm"}]'      a chain: quantize, then encrypt
  lmserde bench --adapter '{"type": "fs", "base_path": "/mnt/nvme/kv"}' --layers all
  lmserde bench --policy 0.1GB/s --policy 3GB/s     what the auto serde would pick on each
  lmserde bench --kv captured.safetensors --json > bench.json
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _layers(text: str) -> int | None:
    return None if text.strip().lower() == "all" else _positive_int(text)


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a percentage >= 0, got {text!r}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    tiers = ", ".join(f"{t.name}={t.gbps:g}" for t in DEFAULT_TIERS)
    p = sub.add_parser(
        "bench",
        help="measure serdes (size, speed, quality, break-even bandwidth) and recommend one",
        description="Run serdes through L1 -> serde wrapper -> L2 adapter -> L1 on realistic KV "
        "chunks; report bytes, throughput, latency, quality and the storage bandwidth below which "
        "each serde beats raw bytes, then recommend a serde per storage tier.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--serde", action="append", metavar="TYPE|JSON",
                   help="serde to measure: a type, a JSON object with options, or a JSON list (a "
                   "chain); repeatable. Default: every installed serde with benchmark options")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", choices=list(BUILTIN_MODELS), default=DEFAULT_MODEL,
                        help=f"synthetic KV generator with this model's shapes (default: {DEFAULT_MODEL})")
    source.add_argument("--kv", metavar="FILE.safetensors",
                        help="real captured KV: tensors 'keys' and 'values', each "
                        "[layers, tokens, kv_heads, head_dim] (needs safetensors)")
    p.add_argument("--chunks", type=_positive_int, default=DEFAULT_CHUNKS,
                   help=f"chunks per run (default: {DEFAULT_CHUNKS})")
    p.add_argument("--repeat", type=_positive_int, default=DEFAULT_REPEAT,
                   help=f"minimum timed rounds (medians) and data-path repeats (default: {DEFAULT_REPEAT})")
    p.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS,
                   help=f"max_workers of every serde that has it (default: {DEFAULT_WORKERS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the KV generator and the queries")
    p.add_argument("--layers", type=_layers, default=DEFAULT_LAYERS, metavar="N|all",
                   help=f"at most N layers per chunk, evenly spaced incl. first and last "
                   f"(default: {DEFAULT_LAYERS}; 'all' for full chunks)")
    p.add_argument("--tokens", type=_positive_int, default=None,
                   help="tokens per chunk (default: 256, LMCache's chunk size)")
    p.add_argument("--adapter", metavar="JSON",
                   help='L2 adapter spec without "serde" (default: {"type": "fs"} in a temporary '
                   "directory)")
    p.add_argument("--tier", action="append", metavar="NAME=GB/s", type=_tier,
                   help=f"storage tier to recommend for; repeatable (default: {tiers}; with "
                   "--adapter, the bandwidth measured on it)")
    p.add_argument("--policy", action="append", metavar="BANDWIDTH", type=_bandwidth,
                   help="replay the auto serde's policy at this storage bandwidth (e.g. 0.1GB/s, "
                   "100MB/s, or GB/s) on the measured codec speeds and ratios, and show what it "
                   "picks; repeatable (with --adapter it also runs at the measured bandwidth)")
    p.add_argument("--max-attn-error", type=_percent, default=100 * DEFAULT_MAX_ATTN_ERROR,
                   metavar="PCT",
                   help="quality bar of lossy serdes: attention mass moved, in percent "
                   f"(default: {100 * DEFAULT_MAX_ATTN_ERROR:g})")
    p.add_argument("--max-output-error", type=_percent, default=100 * DEFAULT_MAX_OUTPUT_ERROR,
                   metavar="PCT",
                   help="quality bar of lossy serdes: relative error of the attention output, in "
                   f"percent (default: {100 * DEFAULT_MAX_OUTPUT_ERROR:g})")
    p.add_argument("--lossless-only", action="store_true",
                   help="recommend only serdes whose round trip is bit-exact")
    p.add_argument("--queries", type=_positive_int, default=DEFAULT_QUERIES,
                   help=f"random queries per layer and KV head for attention fidelity "
                   f"(default: {DEFAULT_QUERIES})")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw ratio vs quality and vs throughput (needs matplotlib)")
    p.set_defaults(handler=run)


def _tier(text: str) -> Any:
    try:
        return parse_tier(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bandwidth(text: str) -> float:
    try:
        return parse_bandwidth(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _options(args: argparse.Namespace) -> Any:
    from lmserde.bench.adapter_choice import parse_adapter_arg
    from lmserde.bench.runner import BenchOptions
    from lmserde.bench.serde_selection import parse_serde_arg

    serdes = [parse_serde_arg(s) for s in args.serde] if args.serde else None
    adapter = parse_adapter_arg(args.adapter) if args.adapter is not None else None
    return BenchOptions(
        serdes=serdes, model=args.model, kv_file=args.kv, chunks=args.chunks, repeat=args.repeat,
        workers=args.workers, seed=args.seed, layers=args.layers, tokens=args.tokens,
        adapter=adapter, tiers=tuple(args.tier) if args.tier else None,
        policy_gbps=tuple(args.policy or ()),
        max_attn_error=args.max_attn_error / 100.0, max_output_error=args.max_output_error / 100.0,
        lossless_only=args.lossless_only,
        queries=args.queries,
    )


def _has_rich() -> bool:
    return importlib.util.find_spec("rich") is not None


def _run_with_progress(opts: Any, show: bool) -> Any:
    from lmserde.bench.runner import run_bench

    if show and _has_rich() and sys.stderr.isatty():
        from lmserde.bench.progress import RichProgress

        with RichProgress() as progress:
            return run_bench(opts, progress, mute_logs=True)
    return run_bench(opts, mute_logs=True)


def _print_report(report: Any) -> None:
    from lmserde.bench.render import print_rich, render_plain

    if not _has_rich():
        print(render_plain(report))
        print("(install rich for a formatted table and progress bars: pip install 'lmserde[bench]')")
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    print_rich(report, console)


def run(args: argparse.Namespace) -> int:
    """Handler of ``lmserde bench``; returns the exit code."""
    try:
        if args.plot:
            from lmserde.bench.plot import check_plot_available

            missing = check_plot_available()
            if missing:
                raise BenchInputError(missing)
        opts = _options(args)
        report = _run_with_progress(opts, show=True)
    except BenchInputError as exc:
        print(f"lmserde bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("lmserde bench: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report)
    if args.plot:
        from lmserde.bench.plot import write_plot

        path = write_plot(report, args.plot)
        print(f"plot written to {path}", file=sys.stderr if args.json else sys.stdout)
    measured = [r for r in report.results if r.ok]
    failed_requested = args.serde and any(r.status == "error" for r in report.results)
    return EXIT_FAILED if failed_requested or not measured else 0
