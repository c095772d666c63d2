"""Break-even storage bandwidth, the load-time model behind it, and storage tiers.

Loading one chunk of ``raw`` bytes from a tier of bandwidth ``B`` costs ``raw / B`` without a
serde and ``stored / B + decode`` through one (transfer, then decode; no overlap assumed, which
is the conservative case). The serde loads faster exactly when ``B < (raw - stored) / decode``:
that bound is its break-even bandwidth. A serde that does not shrink the data (``stored >= raw``)
never wins, whatever the bandwidth.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Tier", "DEFAULT_TIERS", "break_even_bandwidth", "load_seconds", "parse_tier",
           "parse_bandwidth"]

GB = 1e9


@dataclass(frozen=True)
class Tier:
    """A storage tier: a name and a sustained read bandwidth per reader, in GB/s (1e9 B/s)."""

    name: str
    gbps: float
    description: str = ""

    @property
    def bytes_per_second(self) -> float:
        return self.gbps * GB


#: Typical per-reader read bandwidths. Real tiers vary by an order of magnitude: pass ``--tier``.
DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier("NVMe", 3.0, "local NVMe SSD, PCIe 4.0 x4 (~3 GB/s sustained read)"),
    Tier("network storage", 1.0, "NFS / distributed FS over 10-25 GbE (~1 GB/s per reader)"),
    Tier("object store", 0.1, "S3-style object store, one stream per chunk (~100 MB/s)"),
)


def break_even_bandwidth(raw_bytes: float, stored_bytes: float, decode_seconds: float) -> float:
    """Bandwidth in bytes/s below which loading through the serde beats loading raw bytes.

    ``0.0`` when the serde saves no bytes (it never wins); ``inf`` when it saves bytes at no
    measurable decode cost.
    """
    if raw_bytes < 0 or stored_bytes < 0 or decode_seconds < 0:
        raise ValueError("sizes and decode time must be non-negative")
    saved = raw_bytes - stored_bytes
    if saved <= 0:
        return 0.0
    if decode_seconds == 0:
        return math.inf
    return saved / decode_seconds


def load_seconds(stored_bytes: float, decode_seconds: float, bytes_per_second: float) -> float:
    """Time to load one chunk: transfer ``stored_bytes`` at ``bytes_per_second``, then decode."""
    if bytes_per_second <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bytes_per_second}")
    return stored_bytes / bytes_per_second + decode_seconds


_BANDWIDTH_RE = re.compile(
    r"^\s*(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>(?:[kKMG]i?)?B/s)?\s*$")
_UNITS = {"B/s": 1.0, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9,
          "KiB/s": 2.0**10, "kiB/s": 2.0**10, "MiB/s": 2.0**20, "GiB/s": 2.0**30}


def parse_bandwidth(text: str) -> float:
    """A bandwidth (``"0.1GB/s"``, ``"100 MB/s"``, ``"2GiB/s"``, or a bare number of GB/s) in
    GB/s (1e9 B/s); ``ValueError`` for anything else or a value that is not positive."""
    match = _BANDWIDTH_RE.match(text)
    unit = match["unit"] or "GB/s" if match else ""
    if not match or unit not in _UNITS or not float(match["value"]) > 0:
        raise ValueError(f"expected a positive bandwidth such as 0.1GB/s, 100MB/s or 3 (GB/s), "
                         f"got {text!r}")
    return float(match["value"]) * _UNITS[unit] / GB


_TIER_RE = re.compile(r"^\s*(?P<name>[^=]+?)\s*=\s*(?P<bandwidth>.+?)\s*$")


def parse_tier(text: str) -> Tier:
    """``"NAME=BANDWIDTH"`` (e.g. ``"nvme-gen5=12"``, GB/s, or ``"s3=80MB/s"``) as a
    :class:`Tier`; ``ValueError`` otherwise."""
    match = _TIER_RE.match(text)
    try:
        gbps = parse_bandwidth(match["bandwidth"]) if match else 0.0
    except ValueError:
        gbps = 0.0
    if not gbps:
        raise ValueError(f"--tier expects NAME=GB/s with a positive number (e.g. nvme=3 or "
                         f"s3=80MB/s), got {text!r}")
    return Tier(match["name"], gbps, "given with --tier")
