"""results.md and curves.png of a `lopti compare` folder: the paper-style table and learning curves."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from lopti.commands.report import read_metrics

BASE = "grpo"


def results_table(results: dict[str, Any]) -> str:
    """Return held-out accuracy after RL, mean ± std over seeds, per group; and the gain over the base."""
    summary = results["summary"]
    if not summary:
        return "No finished run yet.\n"
    first = next(iter(summary.values()))
    groups = [k for k in first if k not in ("seeds", "before")]
    head = "| variant | seeds | " + " | ".join(f"{results['group']} {g}" for g in groups[:-1])
    lines = [head + " | all | gain over GRPO (all) | warm start (all) |", "|---" * (len(groups) + 4) + "|"]
    base = summary.get(BASE, {}).get("all")
    for variant, stats in summary.items():
        cells = " | ".join(f"{100 * stats[g][0]:.1f} ± {100 * stats[g][1]:.1f}" for g in groups)
        if base is None or variant == BASE:
            gain = "–"
        else:
            points = 100 * (stats["all"][0] - base[0])
            relative = f" ({100 * (stats['all'][0] / base[0] - 1):+.0f}%)" if base[0] > 0 else ""
            gain = f"{points:+.1f} pts{relative}"
        warm = f"{100 * stats['before'][0]:.1f}"
        lines.append(f"| {variant} | {stats['seeds']} | {cells} | {gain} | {warm} |")
    return "\n".join(lines) + "\n"


def _curve(run_dir: Path, key: str, passes: int) -> dict[int, float]:
    return {int(m["step"] // passes): m[key] for m in read_metrics(run_dir / "metrics.jsonl") if key in m}


def plot_compare_curves(out: Path, results: dict[str, Any], keys: dict[str, str]) -> Path | None:
    """Plot each metric (title → key) per RL step: mean over seeds with a ± std band, per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.6), squeeze=False)
    drawn = False
    for axis, (title, key) in zip(axes[0], keys.items(), strict=True):
        for variant in results["summary"]:
            curves = []
            for name, run in results["runs"].items():
                if run["variant"] == variant:
                    passes = 2 if "lopti" in variant else 1
                    curves.append(_curve(out / "runs" / name, key, passes))
            steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            if not steps:
                continue
            window = max(1, len(steps) // 10)
            means, stds = [], []
            for i in range(len(steps)):
                span = steps[max(0, i - window + 1) : i + 1]
                values = [statistics.fmean(c[s] for s in span) for c in curves]
                means.append(statistics.fmean(values))
                stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
            axis.plot(steps, means, label=variant)
            low = [m - s for m, s in zip(means, stds, strict=True)]
            high = [m + s for m, s in zip(means, stds, strict=True)]
            axis.fill_between(steps, low, high, alpha=0.2)
            drawn = True
        axis.set_xlabel("RL step (generated batch)")
        axis.set_title(title)
        axis.legend(fontsize=8)
    figure.tight_layout()
    path = out / "curves.png"
    if drawn:
        figure.savefig(path, dpi=110)
    plt.close(figure)
    return path if drawn else None


def write_compare_report(out: Path, results: dict[str, Any], command: str, base: dict[str, Any]) -> Path:
    """Write results.md (table, curves, the command) in `out`; return its path."""
    first_run = next(iter(results["runs"]), None)
    keys = {}
    if first_run:
        metric_names = {k for m in read_metrics(out / "runs" / first_run / "metrics.jsonl") for k in m}
        keys = {k.removeprefix("rewards/").removesuffix("/mean"): k for k in sorted(metric_names)}
        keys = {title: key for title, key in keys.items() if key.startswith("rewards/") and key.endswith("/mean")}
    curves = plot_compare_curves(out, results, keys) if keys else None
    parts = [
        "# Comparison",
        "",
        f"Command: `{command}`",
        "",
        f'Base estimator: {base.get("advantage_estimator") or "TRL default"}; "grpo" is the base without AR '
        f"or Lopti, the others add them (AR α = {base.get('ar_alpha') or 0.3}); every variant sees "
        f"{base['max_steps'] // (int(base.get('num_iterations', 1)) if base.get('lopti') else 1)} generated batches.",
        "",
        "Held-out accuracy after RL (greedy), mean ± std over seeds, in %:",
        "",
        results_table(results),
    ]
    if curves:
        parts += [
            "Training rewards per RL step (moving mean; band = ± std over seeds):",
            "",
            f"![curves]({curves.name})",
            "",
        ]
    parts.append(f"Raw numbers: results.json ({len(results['runs'])} runs).")
    path = out / "results.md"
    path.write_text("\n".join(parts) + "\n")
    (out / "command.txt").write_text(command + "\n")
    return path
