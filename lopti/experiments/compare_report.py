"""results.md and curves.png of a `lopti compare` folder: the paper-style table, what a powered ablation
needs (95% intervals over seeds, paired differences from GRPO with exact tests, batches to a training-accuracy
threshold, collapses; the statistics in lopti.experiments.statistics) and learning curves.

curves.png has a row of training-reward panels and, when the runs logged update quality
(`update_quality_every`, lopti.train.update_quality), a row per quality family (correct ratio and mean
Δ log π, for positive and for negative advantages) with a panel per π_old bucket and one for all tokens.
Lopti's phase-1 numbers stay in each run's report.md: the other variants have no phase 1.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from lopti.diagnostics.intervals import interval
from lopti.experiments.compare_training import quality_paired_table, shares_table, training_table, variant_curves
from lopti.experiments.machines import machines_section
from lopti.experiments.paired_tables import (
    decodings,
    paired_sections,
    problem_count,
    registered_section,
    scores,
)
from lopti.experiments.statistics import Scores, bootstrap_interval, first_batch_reaching
from lopti.experiments.study import (
    BASE,
    COLLAPSE_FORMAT_ERROR,
    below_warm_start,
    collapsed,
    malformed,
)
from lopti.run_folder import read_metrics, sampled_path
from lopti.tasks.registry import task_of

QUALITY_FAMILIES = ("correct_pos", "correct_neg", "dlogp_pos", "dlogp_neg")
# training accuracy (batch mean of the task's accuracy reward) whose first reaching is counted, and over how
# many generated batches its moving mean is taken
TRAIN_ACCURACY_THRESHOLD = 0.5
THRESHOLD_WINDOW = 3


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


def sampled_evaluations(out: Path, results: dict[str, Any], stage: str = "after") -> dict[str, dict[str, Any]]:
    """Return run name → its sampled held-out evaluation (avg@k) `stage` RL ("before" or "after"), for the runs
    that made one."""
    paths = {name: sampled_path(out / "runs" / name / f"eval_{stage}.json") for name in results["runs"]}
    return {name: json.loads(path.read_text()) for name, path in paths.items() if path.exists()}


def _interval_cell(by_seed: dict[int, Scores], problems: int | None) -> str:
    """Return "mean [95% interval]" in %: a bootstrap over seeds and held-out problems when the evaluations say
    how many problems they scored, else Student's t over the seeds."""
    if not by_seed:
        return "–"
    mean = 100 * float(np.mean([np.mean(v) for v in by_seed.values()]))
    if problems is not None or any(isinstance(v, np.ndarray) for v in by_seed.values()):
        nothing = {seed: np.zeros_like(v) if isinstance(v, np.ndarray) else 0.0 for seed, v in by_seed.items()}
        low, high = bootstrap_interval(by_seed, nothing, problems)
        return f"{mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"
    cell = interval([100 * float(v) for v in by_seed.values()])
    if cell["low"] is None:
        return f"{mean:.1f} (1 seed)"
    return f"{mean:.1f} [{cell['low']:.1f}, {cell['high']:.1f}]"


def threshold_batches(
    out: Path, results: dict[str, Any], variant: str, metric: str, threshold: float
) -> list[int | None]:
    """Return per run of the variant that logged `metric` the first generated batch at which its moving mean
    over THRESHOLD_WINDOW batches reaches `threshold` (None: never)."""
    curves = variant_curves(out, results, variant, metric)
    return [first_batch_reaching(curve, threshold, THRESHOLD_WINDOW) for curve in curves.values() if curve]


def _score_cells(results: dict[str, Any], variant: str, sampled: dict[str, dict], keys: list[str]) -> list[str]:
    """Return the variant's greedy cell, then one per sampled metric of `keys` ("–" where `sampled` lacks it)."""
    cells = [_interval_cell(scores(results, variant), problem_count(results, None))]
    return cells + [
        _interval_cell(scores(results, variant, sampled, key), problem_count(results, sampled)) for key in keys
    ]


def ablation_table(
    out: Path,
    results: dict[str, Any],
    sampled: dict[str, dict],
    metric: str,
    threshold: float,
    sampled_before: dict[str, dict] | None = None,
) -> str:
    """Return per variant: held-out accuracy after RL (all groups) in %, mean [95% interval] over seeds (and
    held-out problems, `_interval_cell`), greedy, and sampled avg@k and pass@k (when evaluated); the mean batch at
    which training accuracy reached `threshold` with how many runs never did; and how many runs collapsed. A first
    row gives the warm start's scores, from the runs' evaluations before RL (`sampled_before`: their sampled ones)."""
    columns = {title: key for title, (source, key) in decodings(sampled).items() if source is not None}
    head = "| variant | seeds | greedy | " + "".join(f"{title} | " for title in columns)
    head += f"batches to training accuracy ≥ {threshold:g} | collapsed |"
    lines = [head, "|---" * (5 + len(columns)) + "|"]
    before = {
        name: {**run, "after": run.get("before", {}), "variant": "warm start"} for name, run in results["runs"].items()
    }
    if before and all("overall" in run["after"] for run in before.values()):
        cells = _score_cells({"runs": before}, "warm start", sampled_before or {}, list(columns.values()))
        lines.append(f"| warm start (before RL) | – | {' | '.join(cells)} | – | – |")
    for variant in results["summary"]:
        runs = [run for run in results["runs"].values() if run["variant"] == variant]
        cells = _score_cells(results, variant, sampled, list(columns.values()))
        batches = threshold_batches(out, results, variant, metric, threshold)
        reached = [b for b in batches if b is not None]
        steps = f"{statistics.fmean(reached):.1f}" if reached else "never"
        steps = f"{steps} ({len(batches) - len(reached)}/{len(batches)} never)" if batches else "–"
        fallen = f"{sum(collapsed(run) for run in runs)}/{len(runs)}"
        if any(collapsed(run) for run in runs):  # which criterion: a format failure is not a fall in accuracy
            fallen += f" ({sum(map(below_warm_start, runs))} below, {sum(map(malformed, runs))} malformed)"
        lines.append(f"| {variant} | {len(runs)} | {' | '.join(cells)} | {steps} | {fallen} |")
    return "\n".join(lines) + "\n"


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
        curves = list(variant_curves(out, results, variant, key).values())
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
    sampled = sampled_evaluations(out, results)
    task = task_of(base)
    metric = task.accuracy_metric()
    parts = [
        "# Comparison",
        "",
        f"Command: `{command}`",
        "",
        *registered_section(out, results, sampled),
        f'Base estimator: {base.get("advantage_estimator") or "TRL default"}; "grpo" is the base without AR, '
        f"Lopti or token-credit presets, the others add theirs (AR α = {base.get('ar_alpha') or task.ar_alpha}); "
        "every variant sees "
        f"{base['max_steps'] // (int(base.get('num_iterations', 1)) if base.get('lopti') else 1)} generated batches.",
        "",
        "Held-out accuracy after RL (greedy), mean ± std over seeds, in %:",
        "",
        results_table(results),
    ]
    if results["runs"]:
        parts += [
            *machines_section(out, results),
            "Held-out accuracy (all groups) in %, mean [95% interval] over seeds, of the warm start and after RL; "
            "training accuracy; collapses:",
            "",
            ablation_table(
                out, results, sampled, metric, TRAIN_ACCURACY_THRESHOLD, sampled_evaluations(out, results, "before")
            ),
            "- Interval: 95% percentile bootstrap over the seeds and the held-out problems (the set's sampling "
            "error does not average out over seeds); where the evaluations do not say how many problems they "
            "scored, mean ± t(0.975, n − 1) · s / √n over the n seeds (Student t, s the sample standard "
            "deviation), and no interval from one seed.",
            f"- Batches to training accuracy ≥ {TRAIN_ACCURACY_THRESHOLD:g}: the first generated batch (not "
            f"optimizer step: Lopti and its controls make two per batch) at which the mean of `{metric}` over "
            f"it and the {THRESHOLD_WINDOW - 1} logged batches before it reaches {TRAIN_ACCURACY_THRESHOLD:g}; "
            "mean over the runs that reached it, the others counted as never.",
            "- Collapsed: the run's greedy held-out accuracy after RL is below its warm start's, or more than "
            f"{COLLAPSE_FORMAT_ERROR:.0%} of its greedy held-out answers are malformed; in brackets, how many runs "
            "each criterion counts.",
            "",
            *paired_sections(results, sampled),
            "Training (rollouts sampled at the recipe's temperature): reward of the first and last generated "
            "batches, and the update quality averaged over the run when it was logged (`update_quality_every`: "
            "share of the batch's tokens whose π moved the way their advantage asks, after the update):",
            "",
            training_table(out, results),
        ]
        quality = quality_paired_table(out, results, BASE)
        if quality:
            parts += [
                "Update quality, paired difference from GRPO (same seed): the run's mean correct ratio among "
                "positive advantages over its measured batches, [95% bootstrap interval over seeds], sign-flip p:",
                "",
                quality,
            ]
        shares = shares_table(out, results)
        if shares:
            parts += [
                "Share of the sampled tokens per π_old bucket (`probs/share_*`), first → last generated batch, "
                "in %, mean over seeds:",
                "",
                shares,
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
