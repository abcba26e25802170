"""report.md for a run: held-out accuracy before and after RL, and the training curves as PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lopti.train.files import write_atomic


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Return the lines of a metrics.jsonl file (empty if there is none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(metrics: list[dict[str, Any]], out: Path, keys: dict[str, str], title: str) -> Path | None:
    """Plot each metric key (label → key) against the step, with a moving average; return the PNG path."""
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
        smooth = [
            sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ]
        axis.plot(steps, values, alpha=0.3, label="per step")
        axis.plot(steps, smooth, label=f"moving mean ({window})")
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


def write_report(run_dir: Path, before: dict[str, Any], after: dict[str, Any], seconds: dict[str, float]) -> Path:
    """Write report.md (and its PNG curves) in `run_dir`; return its path."""
    metrics = read_metrics(run_dir / "metrics.jsonl")
    reward_keys = {
        k: k for k in sorted({k for m in metrics for k in m}) if k.startswith("rewards/") and k.endswith("/mean")
    }
    curves = plot_curves(metrics, run_dir / "curves.png", reward_keys, "training rewards (per generated batch)")
    timing = " · ".join(f"{name} {value:.0f} s" for name, value in seconds.items())
    parts = [
        f"# Run report: {run_dir.name}",
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
    path = run_dir / "report.md"
    write_atomic(path, "\n".join(parts))  # whole or absent: a resumed run redoes a missing report
    return path
