"""Human-readable output of a bench report: a rich table when rich is installed, plain text otherwise."""

from __future__ import annotations

from typing import Any

from lmserde.bench.adapter_bandwidth import describe_adapter_bandwidth
from lmserde.bench.frame_overhead import describe_frame_overhead
from lmserde.bench.policy_replay import describe_replay
from lmserde.bench.recommend import format_bandwidth
from lmserde.bench.report import BenchReport, SerdeResult
from lmserde.text_table import format_table

__all__ = ["TABLE_HEADERS", "table_rows", "render_plain", "print_rich", "describe_source"]

TABLE_HEADERS = ("serde", "stored/chunk", "ratio", "enc GB/s", "dec GB/s", "store ms", "load ms",
                 "rel MSE K/V", "attn w err", "attn out err", "break-even")


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _sci(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def _quality_cells(r: SerdeResult) -> tuple[str, str, str]:
    q = r.quality
    if q is None:
        return "-", "-", "-"
    if q.bit_exact:
        return "exact", "exact", "exact"
    mse = "exact" if q.keys.bit_exact else _sci(q.keys.rel_mse)
    mse += " / " + ("exact" if q.values.bit_exact else _sci(q.values.rel_mse))
    attn = f"{100 * q.attn_weight_tv:.2f}%"
    if q.overall.nonfinite:
        attn += f" ({q.overall.nonfinite} non-finite)"
    return mse, attn, f"{100 * q.attn_output_rel_err:.2f}%"


def _break_even(r: SerdeResult) -> str:
    be = r.break_even_gbps
    if be is None or be == float("inf"):
        return "any"
    if be == 0:
        return "never"
    return f"< {format_bandwidth(be)}"


def table_rows(report: BenchReport) -> list[list[str]]:
    """One row of strings per measured serde, in :data:`TABLE_HEADERS` order."""
    rows = []
    for r in report.results:
        if not r.ok:
            continue
        mse, attn, out = _quality_cells(r)
        rows.append([
            r.label, _size(r.stored_bytes_per_chunk), f"{r.compression_ratio:.2f}x",
            f"{r.encode_gbps:.2f}", f"{r.decode_gbps:.2f}", f"{r.store_ms_p50:.2f}",
            f"{r.load_ms_p50:.2f}", mse, attn, out, _break_even(r),
        ])
    return rows


def describe_source(report: BenchReport) -> str:
    """One line: what the chunks are and how the run was set up."""
    s, st = report.source, report.settings
    if s["kind"] == "synthetic":
        what = f"synthetic {s['model']} KV (seed {s['seed']})"
        total = s["model_layers"]
    else:
        what = f"KV from {s['path']}"
        total = s["file_layers"]
    layers = (f"{s['layers_per_chunk']} of {total} layers" if s["layers_per_chunk"] < total
              else f"{total} layers")
    adapter = st["adapter"].get("type", "?")
    where = " in a temporary directory" if st["adapter"].get("base_path") == "<temporary directory>" else ""
    return (f"{what}: {s['chunks']} chunks x {s['tokens_per_chunk']} tokens x {layers} "
            f"({s['kv_heads']} KV heads x {s['head_dim']}, {s['dtype']}) = {_size(s['chunk_bytes'])} "
            f"per chunk; {adapter} adapter{where}; {_count(st['repeat'], 'repeat')}, "
            f"{_count(st['workers'], 'worker')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _failures(report: BenchReport) -> list[str]:
    return [f"{r.label}: {r.status}: {r.error}" for r in report.results if not r.ok]


def _legend(report: BenchReport) -> str:
    st = report.settings
    rule = ("lossless serdes only" if st["lossless_only"]
            else f"lossy serdes need attn w err <= {100 * st['max_attn_error']:g}% and attn out "
            f"err <= {100 * st['max_output_error']:g}%")
    return ("ratio = raw/stored bytes; GB/s of raw KV bytes (median of timed rounds); store/load ms = "
            "end-to-end per chunk through L1 -> serde wrapper -> adapter (p50); attn w err = share "
            "of attention mass moved, attn out err = relative error of the attention output "
            "(random queries); break-even = storage bandwidth below which loading through the "
            f"serde beats loading raw bytes. Recommendations ({rule}; load time = "
            "stored/bandwidth + decode):")


def render_plain(report: BenchReport) -> str:
    """The whole report as plain text (no rich needed)."""

    lines = [f"lmserde bench: {describe_source(report)}", ""]
    rows = table_rows(report)
    lines.append(format_table(TABLE_HEADERS, rows) if rows else "(no serde could be measured)")
    failures = _failures(report)
    if failures:
        lines += ["", "Not measured:", *(f"  {f}" for f in failures)]
    bandwidth = describe_adapter_bandwidth(report.adapter_bandwidth)
    if bandwidth:
        lines += ["", bandwidth]
    lines += ["", _legend(report), *(f"  {r.text}" for r in report.recommendations)]
    for replay in report.policy:
        lines += ["", *describe_replay(replay)]
    frame = describe_frame_overhead(report.frame)
    if frame:
        lines += ["", frame]
    if report.notes:
        lines += ["", "Notes:", *(f"  - {n}" for n in report.notes)]
    lines += ["", f"Finished in {report.elapsed_seconds:.1f} s."]
    return "\n".join(lines)


def _style(r: SerdeResult) -> str:
    if r.quality is not None and r.quality.bit_exact:
        return "green"
    return "yellow" if r.acceptable else "red"


def print_rich(report: BenchReport, console: Any) -> None:
    """Print the report with rich (``console`` is a ``rich.console.Console``)."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text.assemble(("lmserde bench", "bold"), ": ", describe_source(report)), highlight=False)
    table = Table(show_lines=False, header_style="bold")
    for i, header in enumerate(TABLE_HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=i == 0)
    measured = [r for r in report.results if r.ok]
    for r, row in zip(measured, table_rows(report)):
        cells: list[Any] = [Text(c) for c in row]
        cells[8] = Text(row[8], style=_style(r))
        cells[9] = Text(row[9], style=_style(r))
        table.add_row(*cells)
    console.print(table)
    failures = _failures(report)
    if failures:
        console.print(Text("Not measured:", style="bold"))
        for f in failures:
            console.print(f"  {f}", markup=False, highlight=False)
    bandwidth = describe_adapter_bandwidth(report.adapter_bandwidth)
    if bandwidth:
        console.print(bandwidth, markup=False, highlight=False)
    console.print(_legend(report), markup=False, highlight=False)
    for rec in report.recommendations:
        head, _, rest = rec.text.partition(": ")
        console.print(Text.assemble("  ", (head, "bold"), ": ", rest), highlight=False)
    for replay in report.policy:
        for line in describe_replay(replay):
            console.print(line, markup=False, highlight=False)
    frame = describe_frame_overhead(report.frame)
    if frame:
        console.print(frame, markup=False, highlight=False)
    if report.notes:
        console.print(Text("Notes:", style="bold"))
        for n in report.notes:
            console.print(f"  - {n}", markup=False, highlight=False)
    console.print(f"Finished in {report.elapsed_seconds:.1f} s.", highlight=False)
