"""Figures of the probe, after the paper's: Δπ by bucket (Fig. 1), correct ratio by method (Fig. 3) with
95% intervals over batches, per optimizer regime, and gradient norm against π with the Proposition 4.2 bounds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


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
