"""Figures of the probe, after the paper's: Δπ by bucket (Fig. 1), correct ratio by method (Fig. 3) with
95% intervals over batches, per optimizer regime, and gradient norm against π with the Proposition 4.2 bounds;
and the same correct ratio measured during training (`update_quality_every`), over steps."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The trainer's update-quality correct ratios (lopti/train/update_quality.py): quality/[phase1/]correct_<sign>_<bucket>
QUALITY_CORRECT = re.compile(r"quality/(phase1/)?correct_(pos|neg)_(.+)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_delta_pi(result: dict[str, Any], out: Path) -> Path | None:
    """Mean Δπ of the tokens of each bucket (x) after updating all tokens or one bucket only (bars).

    The bucket-only updates run under the first optimizer regime only; Δπ pools the tokens of every batch.
    """
    if not result.get("updates"):
        return None
    plt = _pyplot()
    labels = result["buckets"]
    regime, entries = next(iter(result["updates"].items()))
    updates = (["grpo"] if "grpo" in entries else []) + [name for name in entries if name.startswith("only ")]
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=False)
    width = 0.8 / len(updates)
    for axis, sign in zip(axes, ("positive", "negative"), strict=True):
        for u, name in enumerate(updates):
            values = [entries[name]["delta_pi"][label][sign]["mean"] or 0.0 for label in labels]
            positions = [k + (u - (len(updates) - 1) / 2) * width for k in range(len(labels))]
            axis.bar(positions, values, width, label="all tokens (GRPO)" if name == "grpo" else name)
        axis.axhline(0.0, color="black", linewidth=0.6)
        axis.set_xticks(range(len(labels)), labels)
        axis.set_xlabel("π_old bucket of the measured tokens")
        axis.set_title(f"tokens with {sign} advantage")
    axes[0].set_ylabel(f"mean Δπ after one {regime} update")
    axes[1].legend(fontsize=7)
    figure.suptitle("Which tokens move when only one probability bucket is updated")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def plot_correct_ratio(result: dict[str, Any], out: Path) -> Path | None:
    """Share of tokens whose probability moved the way their advantage asks, per bucket and method, with the
    95% interval over batches as error bars: one column per optimizer regime, one row per advantage sign."""
    if not result.get("updates"):
        return None
    plt = _pyplot()
    labels = [*result["buckets"], "all"]
    regimes = list(result["updates"])
    figure, axes = plt.subplots(2, len(regimes), figsize=(6.5 * len(regimes), 7), squeeze=False, sharey=True)
    for column, regime in enumerate(regimes):
        entries = result["updates"][regime]
        methods = [m for m in entries if not m.startswith("only ")]
        width = 0.8 / max(1, len(methods))
        for axis, (sign, rule) in zip(axes[:, column], (("positive", "π rose"), ("negative", "π fell")), strict=True):
            for m, method in enumerate(methods):
                cells = [entries[method]["correct_ratio"][label][sign] for label in labels]
                means = [math.nan if c["mean"] is None else c["mean"] for c in cells]
                errors = [
                    [0.0 if c["low"] is None else c["mean"] - c["low"] for c in cells],
                    [0.0 if c["high"] is None else c["high"] - c["mean"] for c in cells],
                ]
                positions = [k + (m - (len(methods) - 1) / 2) * width for k in range(len(labels))]
                axis.bar(positions, means, width, yerr=errors, capsize=2, label=method)
            axis.axhline(0.5, color="black", linewidth=0.6, linestyle="--")
            axis.set_xticks(range(len(labels)), labels)
            axis.set_ylim(0, 1)
            axis.set_xlabel("π_old bucket")
            axis.set_ylabel(f"correct ratio (Â {'>' if sign == 'positive' else '<'} 0: {rule})")
            axis.set_title(f"{regime}: tokens with {sign} advantage")
            axis.legend(fontsize=8)
    figure.suptitle(f"Correct ratio after one update, mean over {result['batches']} batch(es) with 95% intervals")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def plot_gradient_bounds(result: dict[str, Any], out: Path) -> Path:
    """Per-token gradient norms at the logits and the last hidden state against π, with the bound lines."""
    plt = _pyplot()
    bound, scatter = result["bound"], result["bound"]["scatter"]
    vocab = bound["vocab_size"]
    grid = [k / 200 for k in range(201)]
    low = [(1 - p) * math.sqrt(vocab / (vocab - 1)) for p in grid]
    high = [(1 - p) * math.sqrt(2) for p in grid]
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    panels = (
        ("logit_norm", 1.0, "at the logits (exact bounds)"),
        ("hidden_norm", None, "at the last hidden state (σ-scaled bounds)"),
    )
    for axis, (key, scale, title) in zip(axes, panels, strict=True):
        axis.scatter(scatter["pi"], scatter[key], s=3, alpha=0.4, label="tokens")
        lower_scale = scale if scale is not None else bound["hidden"]["sigma_min"]
        upper_scale = scale if scale is not None else bound["hidden"]["sigma_max"]
        axis.plot(grid, [lower_scale * v for v in low], color="green", label="lower bound")
        axis.plot(grid, [upper_scale * v for v in high], color="red", label="upper bound")
        if scale is None:  # σ_max/σ_min spans orders of magnitude: a log axis keeps the tokens visible
            axis.set_yscale("log")
        axis.set_xlabel("π of the sampled token")
        axis.set_ylabel("‖∂(−log π)/∂·‖")
        axis.set_title(title)
        axis.legend(fontsize=8)
    figure.suptitle("Proposition 4.2: a token's gradient norm is set by 1 − π")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def plot_update_quality(
    series: Mapping[str, Mapping[int, float]], out: Path, title: str = "", xlabel: str = "optimizer step"
) -> Path | None:
    """Plot the correct ratio logged during training per π_old bucket against the step: tokens with Â > 0 whose
    probability rose (left), with Â < 0 whose probability fell (right); Lopti's phase 1 alone dashed.

    `series` maps metric names as the trainer logs them (`quality/correct_pos_<bucket>`,
    `quality/phase1/correct_neg_<bucket>`, …) to {step: value}; other names are ignored, so a caller may pass
    every metric of a run. Return the PNG path, None when no correct ratio is present.
    """
    curves = {}  # (sign, bucket, phase1) → sorted (steps, values)
    for name, points in series.items():
        match = QUALITY_CORRECT.fullmatch(name)
        if match and points:
            steps = sorted(points)
            curves[match[2], match[3], bool(match[1])] = (steps, [points[step] for step in steps])
    if not curves:
        return None
    plt = _pyplot()
    buckets = sorted({bucket for _, bucket, _ in curves}, key=lambda b: (b == "all", b))  # "[0.00,…" sort by edge
    colours = {b: "black" if b == "all" else f"C{k}" for k, b in enumerate(buckets)}
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    panels = (("pos", "Â > 0: share whose π rose"), ("neg", "Â < 0: share whose π fell"))
    for axis, (sign, label) in zip(axes, panels, strict=True):
        for bucket in buckets:
            for phase1 in (False, True):
                if (sign, bucket, phase1) in curves:
                    steps, values = curves[sign, bucket, phase1]
                    axis.plot(
                        steps, values, color=colours[bucket], marker=".", linestyle="--" if phase1 else "-",
                        label=f"π_old ∈ {bucket}" if bucket != "all" else "all tokens",
                    )  # fmt: skip
        axis.axhline(0.5, color="grey", linewidth=0.6, linestyle=":")
        axis.set_ylim(0, 1)
        axis.set_xlabel(xlabel)
        axis.set_title(label)
        handles, names = axis.get_legend_handles_labels()
        unique = dict(zip(names, handles, strict=True))  # one entry per bucket; phase 1 repeats its colour
        axis.legend(unique.values(), unique.keys(), fontsize=7)
    axes[0].set_ylabel("correct ratio after the update")
    dashed = " (dashed: after Lopti's phase 1)" if any(phase1 for _, _, phase1 in curves) else ""
    figure.suptitle((title or "Update quality per π_old bucket") + dashed)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
