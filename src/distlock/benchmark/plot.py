"""The ``distlock bench --plot`` chart: three panels, one row per backend, same colour per backend throughout.

1. Uncontended acquire+release pairs per second, drawn over a pale bar of the backend's raw limit (probe / 2),
   labelled with the rate and the share of the limit reached; a black tick marks the async API's rate, and the
   label gives its cost relative to the sync path.
2. Latency, log scale: p50 (dot) to p99 (end of the line) of one uncontended acquire+release and of a hand-off
   between two processes.
3. Throughput under 8-way contention, labelled with the per-worker fairness (fewest / most acquisitions).
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Any

PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def _fmt(rate: float) -> str:
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def plot(results: list[dict[str, Any]], path: Path, title: str | None = None) -> None:
    """Draw ``results`` (``distlock bench``'s backends, or benchmarks/peers.py's rows: a ``label`` names the row, and
    rows of one backend share its colour) to the PNG ``path``."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        from .._dist import install_hint
        from .._errors import ConfigError

        raise ConfigError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(reversed(results))  # first backend on top
    labels = [r.get("label") or r["backend"] for r in rows]
    if any(r.get("label") for r in rows):
        labels = [f"{r['backend']}: {label}" for r, label in zip(rows, labels, strict=True)]
    backends = list(dict.fromkeys(r["backend"] for r in results))  # in the order given
    colors = [PALETTE[backends.index(r["backend"]) % len(PALETTE)] for r in rows]
    ys = list(range(len(rows)))
    height = 1.6 + 0.55 * len(rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, height), sharey=True, gridspec_kw={"wspace": 0.12})
    # the panel titles need the same room above the rows however many rows there are (matplotlib's default is a
    # share of the height: a tall chart of many rows had a band of white under its title)
    fig.subplots_adjust(top=1 - min(0.12, 0.7 / height))
    ax_rate, ax_lat, ax_cont = axes

    # 1. uncontended rate vs the raw limit
    top, bottom = 1.0, float("inf")
    for y, r, c in zip(ys, rows, colors, strict=True):
        raw = r["raw"]["limit_per_s"] if r.get("raw") else None
        rate = r["uncontended"]["rate_per_s"] if r.get("uncontended") else None
        if raw:
            ax_rate.barh(y, raw, color=c, alpha=0.18, height=0.6)
            top = max(top, raw)
        if rate:
            ax_rate.barh(y, rate, color=c, height=0.6)
            top = max(top, rate)
            bottom = min(bottom, rate)
            label = f" {_fmt(rate)}/s, {rate / raw:.0%} of limit" if raw else f" {_fmt(rate)}/s (raw limit n/a)"
            arate = ((r.get("async") or {}).get("uncontended") or {}).get("rate_per_s")
            if arate:
                ax_rate.plot([arate], [y], marker="|", ms=16, mew=2, color="black")
                label += f"\n async {_fmt(arate)}/s, {r['async_cost_ratio']:.2f}x cost"
            ax_rate.text(max(rate, raw or 0), y, label, va="center", fontsize=9)
    ax_rate.set_xscale("log")
    left = 10 ** max(0, math.floor(math.log10(bottom)) - 1) if bottom != float("inf") else 1
    ax_rate.set_xlim(left=left, right=top * 40)
    ax_rate.set_title(
        "uncontended acquire + release per second\n(pale: raw round-trip limit / 2"
        + ("; black tick: async API)" if any(r.get("async") for r in rows) else ")"),
        fontsize=10,
    )

    # 2. latency p50 -> p99, uncontended and hand-off
    for y, r, c in zip(ys, rows, colors, strict=True):
        for key, dy, marker, name in (("uncontended", 0.15, "o", "uncontended"), ("handoff", -0.15, "D", "hand-off")):
            m = r.get(key)
            if not m or m["latency_ms"]["p50"] is None:
                continue
            p50, p99 = m["latency_ms"]["p50"], m["latency_ms"]["p99"]
            ax_lat.plot([p50, p99], [y + dy, y + dy], color=c, lw=2.5, solid_capstyle="round")
            ax_lat.plot([p50], [y + dy], marker=marker, color=c, ms=7)
            ax_lat.text(p99, y + dy, f"  {name} {p50:.2g} / {p99:.2g} ms", va="center", fontsize=8)
    ax_lat.set_xscale("log")
    lo, hi = ax_lat.get_xlim()
    ax_lat.set_xlim(lo, hi * 30)
    ax_lat.set_title(
        "latency, ms (dot = p50, line end = p99)\n● acquire+release   ◆ hand-off between processes", fontsize=10
    )

    # 3. 8-way contention throughput and fairness
    ctop = 1.0
    for y, r, c in zip(ys, rows, colors, strict=True):
        m = r.get("contention")
        if not m:
            continue
        ax_cont.barh(y, m["rate_per_s"], color=c, height=0.6)
        ctop = max(ctop, m["rate_per_s"])
        ax_cont.text(
            m["rate_per_s"], y, f" {_fmt(m['rate_per_s'])}/s, per worker {m['min']}-{m['max']}", va="center", fontsize=9
        )
    ax_cont.set_xlim(0, ctop * 1.9)
    workers = next((r["contention"]["workers"] for r in results if r.get("contention")), 8)
    ax_cont.set_title(
        f"{workers} processes contending: acquisitions per second\n(label: fewest-most per worker)", fontsize=10
    )

    ax_rate.set_yticks(ys, labels, fontsize=11)
    for ax in axes:
        ax.grid(axis="x", which="major", alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
    host = f"{platform.node() or 'this host'} ({platform.machine()}, Python {platform.python_version()})"
    fig.suptitle(
        f"{title} on {host}" if title else f"distlock bench on {host}",
        fontsize=11,
        x=0.01,
        y=1.0 + 0.3 / height,
        ha="left",
        fontweight="bold",
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
