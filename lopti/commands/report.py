"""report.md for a run: held-out accuracy before and after RL, and the training curves as PNG (rewards, the
gradient share per probability bucket, and the update quality when the run logged it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lopti.commands.files import write_atomic
from lopti.diagnostics.plots import plot_update_quality


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Return the lines of a metrics.jsonl file (empty if there is none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def metric_series(metrics: list[dict[str, Any]], prefix: str) -> dict[str, dict[int, float]]:
    """Return {key: {step: value}} for every logged key that starts with `prefix`."""
    series: dict[str, dict[int, float]] = {}
    for line in metrics:
        for key, value in line.items():
            if key.startswith(prefix):
                series.setdefault(key, {})[line["step"]] = value
    return series


def moving_mean(values: list[float], window: int) -> list[float]:
    """Return the mean of each value with the up to `window` − 1 values before it."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def plot_curves(metrics: list[dict[str, Any]], out: Path, keys: dict[str, str], title: str) -> Path | None:
    """Plot each metric key (label → key) against the step, with a moving mean; return the PNG path (None if none)."""
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.4), squeeze=False)
    drawn = False
    for axis, (label, key) in zip(axes[0], keys.items(), strict=True):
        points = [(m["step"], m[key]) for m in metrics if key in m]
        if not points:
            axis.set_visible(False)
            continue
        steps, values = zip(*points, strict=True)
        window = max(1, len(values) // 10)
        axis.plot(steps, values, alpha=0.3, label="per step")
        axis.plot(steps, moving_mean(values, window), label=f"moving mean ({window})")
        axis.set_xlabel("optimizer step")
        axis.set_title(label)
        axis.legend(fontsize=8)
        drawn = True
    figure.suptitle(title)
    figure.tight_layout()
    if drawn:
        figure.savefig(out, dpi=110)
    plt.close(figure)
    return out if drawn else None


def plot_gradient_share(metrics: list[dict[str, Any]], out: Path) -> Path | None:
    """Plot each π_old bucket's share of the gradient (probs/grad_share_*) against the step, stacked; return the PNG.

    The shares are Σ|Â|(1 − π_old) per bucket over all buckets (docs/paper.md §3, §9): the paper's claim is
    that the lowest bucket dominates. None when no step logged a gradient.
    """
    prefix = "probs/grad_share_"
    keys = sorted({k for m in metrics for k in m if k.startswith(prefix)})  # "[0.00,0.25)" < "[0.25,0.50)" < …
    # a step whose advantages are all zero has no gradient to share: its shares are all zero
    logged = [m for m in metrics if keys and all(k in m for k in keys) and sum(m[k] for k in keys) > 0]
    if not logged:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = max(1, len(logged) // 10)
    figure, axis = plt.subplots(figsize=(6, 3.4))
    shares = [moving_mean([m[k] for m in logged], window) for k in keys]
    axis.stackplot([m["step"] for m in logged], shares, labels=[f"π_old ∈ {k[len(prefix) :]}" for k in keys])
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("share of the gradient")
    axis.set_ylim(0, 1)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle(f"gradient share per token-probability bucket (moving mean over {window} steps)")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def eval_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Return a markdown table of held-out accuracy per group (people, level), before and after."""
    lines = [
        f"| {after['group']} | prompts | accuracy before | accuracy after | change | format errors after |",
        "|---|---|---|---|---|---|",
    ]
    rows = [*after["per_group"].items(), ("all", after["overall"])]
    for size, stats in rows:
        old = before["per_group"][size] if size != "all" else before["overall"]
        change = 100 * (stats["accuracy"] - old["accuracy"])
        lines.append(
            f"| {size} | {stats['n']} | {100 * old['accuracy']:.1f}% | {100 * stats['accuracy']:.1f}% | "
            f"{change:+.1f} pts | {100 * stats['format_error']:.1f}% |"
        )
    return "\n".join(lines)


def pass_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Return a markdown table of pass@k per group, before and after (k = the number of samples)."""
    key = f"pass@{after['samples']}"
    lines = [f"| {after['group']} | {key} before | {key} after |", "|---|---|---|"]
    for size, stats in [*after["per_group"].items(), ("all", after["overall"])]:
        old = before["per_group"][size] if size != "all" else before["overall"]
        lines.append(f"| {size} | {100 * old[key]:.1f}% | {100 * stats[key]:.1f}% |")
    return "\n".join(lines)


def write_report(
    run_dir: Path, before: dict[str, Any], after: dict[str, Any], seconds: dict[str, float], method: str
) -> Path:
    """Write report.md (and its PNG curves) in `run_dir`; return its path. `method` names the method and settings."""
    metrics = read_metrics(run_dir / "metrics.jsonl")
    reward_keys = {
        k: k for k in sorted({k for m in metrics for k in m}) if k.startswith("rewards/") and k.endswith("/mean")
    }
    curves = plot_curves(metrics, run_dir / "curves.png", reward_keys, "training rewards (per generated batch)")
    gradient_share = plot_gradient_share(metrics, run_dir / "gradient_share.png")
    quality = plot_update_quality(metric_series(metrics, "quality/"), run_dir / "update_quality.png")
    timing = " · ".join(f"{name} {value:.0f} s" for name, value in seconds.items())
    parts = [
        f"# Run report: {run_dir.name}",
        "",
        f"Method: {method}.",
        "",
        f"Wall time: {sum(seconds.values()):.0f} s ({timing}).",
        "",
        f"## Held-out accuracy (greedy decoding, {after['overall']['n']} prompts never seen in training)",
        "",
        eval_table(before, after),
        "",
    ]
    if "sampled" in after:
        k, temperature = after["sampled"]["samples"], after["sampled"]["temperature"]
        parts += [
            f"## Held-out accuracy, {k} samples per prompt at T={temperature} (avg@{k}; pass@{k} below)",
            "",
            eval_table(before["sampled"], after["sampled"]),
            "",
            pass_table(before["sampled"], after["sampled"]),
            "",
        ]
    if curves:
        parts += ["## Training curves", "", f"![training rewards]({curves.name})", ""]
    if gradient_share:
        parts += [
            "## Gradient share by token probability",
            "",
            "Each π_old bucket's share of the policy gradient, Σ |Â| (1 − π_old) over its tokens "
            "(`probs/grad_share_*` in metrics.jsonl; docs/paper.md §9).",
            "",
            f"![gradient share]({gradient_share.name})",
            "",
        ]
    if quality:
        parts += [
            "## Update quality during training",
            "",
            "After the update of every `update_quality_every`-th RL step, the share of the batch's tokens whose "
            "probability moved the way their advantage asks: rose for Â > 0 (left), fell for Â < 0 (right), per "
            "π_old bucket (`quality/correct_*` in metrics.jsonl; docs/trainer.md). Above 0.5 the update moved most "
            "of a bucket's tokens the right way; dashed lines, where present, are Lopti's phase 1 alone.",
            "",
            f"![update quality]({quality.name})",
            "",
        ]
    path = run_dir / "report.md"
    write_atomic(path, "\n".join(parts))  # whole or absent: a resumed run redoes a missing report
    return path
