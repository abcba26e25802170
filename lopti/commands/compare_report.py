"""results.md and curves.png of a `lopti compare` folder: the paper-style table and learning curves.

curves.png has a row of training-reward panels and, when the runs logged update quality
(`update_quality_every`, lopti.train.update_quality), a row per quality family (correct ratio and mean
Δ log π, for positive and for negative advantages) with a panel per π_old bucket and one for all tokens.
Lopti's phase-1 numbers stay in each run's report.md: the other variants have no phase 1.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from lopti.commands.report import read_metrics
from lopti.core.constants import AR_ALPHA_KK
from lopti.core.methods import parse_method

BASE = "grpo"
QUALITY_FAMILIES = ("correct_pos", "correct_neg", "dlogp_pos", "dlogp_neg")


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


TRAINING_COLUMNS = {  # metric key → column title of the training table
    "reward": "reward",
    "quality/correct_pos_all": "correct ratio Â>0",
    "quality/correct_neg_all": "correct ratio Â<0",
}


def training_table(out: Path, results: dict[str, Any], window: int = 5) -> str:
    """Return per variant the training reward of the first and the last `window` generated batches and the mean
    update quality over the run (when logged), mean ± std over seeds.

    The rollouts are sampled at the recipe's temperature, so this shows what RL changed in the policy's own
    samples even where the greedy held-out accuracy does not move."""
    spans = {"reward": ("first", "last")}  # the other columns average the whole run
    rows = []
    for variant in results["summary"]:
        passes = 2 if parse_method(variant).lopti else 1
        runs = [out / "runs" / name for name, run in results["runs"].items() if run["variant"] == variant]
        cells = []
        for key in TRAINING_COLUMNS:
            curves = [_curve(run, key, passes) for run in runs]
            for span in spans.get(key, ("all",)):
                if not all(curves):
                    cells.append("–")
                    continue
                values = [statistics.fmean(curve[step] for step in _span(curve, span, window)) for curve in curves]
                spread = statistics.stdev(values) if len(values) > 1 else 0.0
                cells.append(f"{statistics.fmean(values):.3f} ± {spread:.3f}")
        rows.append(f"| {variant} | " + " | ".join(cells) + " |")
    head = f"| variant | reward, first {window} batches | reward, last {window} batches | "
    head += " | ".join(title + " (mean)" for key, title in TRAINING_COLUMNS.items() if key != "reward") + " |"
    return "\n".join([head, "|---" * (len(TRAINING_COLUMNS) + 2) + "|", *rows]) + "\n"


def _span(curve: dict[int, float], span: str, window: int) -> list[int]:
    steps = sorted(curve)
    return {"first": steps[:window], "last": steps[-window:]}.get(span, steps)


def _curve(run_dir: Path, key: str, passes: int) -> dict[int, float]:
    return {int(m["step"] // passes): m[key] for m in read_metrics(run_dir / "metrics.jsonl") if key in m}


def curve_panels(metric_names: set[str]) -> list[dict[str, str]]:
    """Return curves.png's rows of panels (title → metric key): the training rewards, then one row per update
    quality family the runs logged (a panel per bucket, "all" last); no row for a family nobody logged."""
    rewards = {
        key.removeprefix("rewards/").removesuffix("/mean"): key
        for key in sorted(metric_names)
        if key.startswith("rewards/") and key.endswith("/mean")
    }
    rows = [rewards] if rewards else []
    for family in QUALITY_FAMILIES:
        prefix = f"quality/{family}_"
        row = {f"{family} {key.removeprefix(prefix)}": key for key in sorted(metric_names) if key.startswith(prefix)}
        if row:
            rows.append(row)
    return rows


def plot_compare_curves(out: Path, results: dict[str, Any], rows: list[dict[str, str]]) -> Path | None:
    """Plot each metric (title → key) per RL step: mean over seeds with a ± std band, per variant; a row of
    panels per entry of `rows`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = max(len(row) for row in rows)
    figure, axes = plt.subplots(len(rows), columns, figsize=(5.5 * columns, 3.6 * len(rows)), squeeze=False)
    drawn = False
    for row, row_axes in zip(rows, axes, strict=True):
        for axis in row_axes[len(row) :]:
            axis.axis("off")
        for axis, (title, key) in zip(row_axes, row.items(), strict=False):
            drawn |= _plot_panel(axis, out, results, key)
            axis.set_xlabel("RL step (generated batch)")
            axis.set_title(title)
            axis.legend(fontsize=8)
    figure.tight_layout()
    path = out / "curves.png"
    if drawn:
        figure.savefig(path, dpi=110)
    plt.close(figure)
    return path if drawn else None


def _plot_panel(axis: Any, out: Path, results: dict[str, Any], key: str) -> bool:
    """Draw one metric's mean ± std band per variant on `axis`; return whether anything was drawn."""
    drawn = False
    for variant in results["summary"]:
        passes = 2 if parse_method(variant).lopti else 1
        runs = [name for name, run in results["runs"].items() if run["variant"] == variant]
        curves = [_curve(out / "runs" / name, key, passes) for name in runs]
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
    return drawn


def write_compare_report(out: Path, results: dict[str, Any], command: str, base: dict[str, Any]) -> Path:
    """Write results.md (table, curves, the command) in `out`; return its path."""
    logs = [read_metrics(out / "runs" / name / "metrics.jsonl") for name in results["runs"]]
    metric_names = {key for log in logs for line in log for key in line}
    rows = curve_panels(metric_names)
    curves = plot_compare_curves(out, results, rows) if rows else None
    parts = [
        "# Comparison",
        "",
        f"Command: `{command}`",
        "",
        f'Base estimator: {base.get("advantage_estimator") or "TRL default"}; "grpo" is the base without AR, '
        f"Lopti or token-credit presets, the others add theirs (AR α = {base.get('ar_alpha') or AR_ALPHA_KK}); "
        "every variant sees "
        f"{base['max_steps'] // (int(base.get('num_iterations', 1)) if base.get('lopti') else 1)} generated batches.",
        "",
        "Held-out accuracy after RL (greedy), mean ± std over seeds, in %:",
        "",
        results_table(results),
    ]
    if results["runs"]:
        parts += [
            "Training (rollouts sampled at the recipe's temperature): reward of the first and last generated "
            "batches, and the update quality averaged over the run when it was logged (`update_quality_every`: "
            "share of the batch's tokens whose π moved the way their advantage asks, after the update):",
            "",
            training_table(out, results),
        ]
    if curves:
        parts += [
            "Training rewards (and update quality, when logged) per RL step (moving mean; band = ± std over seeds):",
            "",
            f"![curves]({curves.name})",
            "",
        ]
    parts.append(f"Raw numbers: results.json ({len(results['runs'])} runs).")
    path = out / "results.md"
    path.write_text("\n".join(parts) + "\n")
    (out / "command.txt").write_text(command + "\n")
    return path
