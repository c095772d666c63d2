"""``--plot FILE.png``: compression ratio against quality and against throughput.

Needs matplotlib (``pip install 'lmserde[plot]'``); :func:`check_plot_available` tells the CLI
before anything runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lmserde.bench.report import BenchReport

__all__ = ["PLOT_INSTALL_HINT", "check_plot_available", "write_plot"]

PLOT_INSTALL_HINT = "pip install matplotlib  (or: pip install 'lmserde[plot]')"


def check_plot_available() -> str | None:
    """``None`` when matplotlib can be imported, else a message saying how to install it."""
    if importlib.util.find_spec("matplotlib") is None:
        return f"--plot needs matplotlib, which is not installed. Install it with: {PLOT_INSTALL_HINT}"
    return None


def write_plot(report: BenchReport, path: str | Path) -> Path:
    """Draw the report's measured serdes into a PNG at ``path`` and return the path.

    Left: attention-weight and attention-output error (%) against compression ratio (bit-exact
    serdes sit at 0), with the run's quality bars. Right: encode and decode throughput (GB/s, log
    scale) against compression ratio. One color per serde.
    """
    message = check_plot_available()
    if message is not None:
        raise ValueError(message)
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    measured = [r for r in report.results if r.ok and r.quality is not None]
    colors = plt.get_cmap("tab10").colors
    fig, (ax_q, ax_t) = plt.subplots(1, 2, figsize=(13, 5.5), constrained_layout=True)
    placed: dict[tuple[object, float, float], int] = {}

    def label(ax: object, text: str, x: float, y: float) -> None:
        spot = (ax, round(x, 2), round(y, 1))
        n = placed.get(spot, 0)
        placed[spot] = n + 1  # stack labels of points that coincide
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(6, 4 + 11 * n),  # type: ignore[attr-defined]
                    fontsize=8)

    for i, r in enumerate(measured):
        q = r.quality
        assert q is not None
        color = colors[i % len(colors)]
        weight_err = 0.0 if q.bit_exact else 100 * q.attn_weight_tv
        output_err = 0.0 if q.bit_exact else 100 * q.attn_output_rel_err
        ax_q.scatter([r.compression_ratio], [weight_err], marker="o", s=60, color=color)
        ax_q.scatter([r.compression_ratio], [output_err], marker="^", s=45, facecolors="none",
                     edgecolors=[color])
        label(ax_q, r.label + ("" if r.acceptable else " (over the bar)"), r.compression_ratio,
              max(weight_err, output_err))
        decode, encode = max(r.decode_gbps, 1e-6), max(r.encode_gbps, 1e-6)
        ax_t.scatter([r.compression_ratio], [decode], marker="o", s=60, color=color)
        ax_t.scatter([r.compression_ratio], [encode], marker="^", s=45, facecolors="none",
                     edgecolors=[color])
        label(ax_t, r.label, r.compression_ratio, decode)
    settings = report.settings
    if not settings["lossless_only"]:
        for value, name in ((settings["max_attn_error"], "weights"),
                            (settings["max_output_error"], "output")):
            ax_q.axhline(100 * value, linestyle="--", linewidth=1, color="grey")
            ax_q.annotate(f"bar: {name} <= {100 * value:g}%", (0, 100 * value),
                          xycoords=("axes fraction", "data"), fontsize=8, color="grey",
                          textcoords="offset points", xytext=(4, 3))
    ax_q.set_xlabel("compression ratio (raw / stored bytes)")
    ax_q.set_ylabel("attention error, % (0 = bit-exact)")
    ax_q.set_title("size vs quality (filled: weights, hollow: output)")
    ax_t.set_xlabel("compression ratio (raw / stored bytes)")
    ax_t.set_ylabel("throughput of raw KV bytes, GB/s (log scale)")
    ax_t.set_yscale("log")
    for axis in (ax_t.yaxis,):
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(FormatStrFormatter("%g"))
    ax_t.set_title("size vs speed (filled: decode, hollow: encode)")
    for ax in (ax_q, ax_t):
        ax.grid(True, alpha=0.3)
    source = report.source
    name = source.get("model") or Path(str(source.get("path", "KV file"))).name
    fig.suptitle(f"lmserde bench: {name}, {source['layers_per_chunk']} layers x "
                 f"{source['tokens_per_chunk']} tokens per chunk")
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
