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

from lopti.commands.report import read_metrics
from lopti.core.constants import AR_ALPHA_KK
from lopti.diagnostics.intervals import interval
from lopti.experiments.compare_training import quality_paired_table, shares_table, training_table, variant_curves
from lopti.experiments.statistics import ALPHA, first_batch_reaching, fisher_p, holm, paired_difference, smallest_p
from lopti.tasks.registry import TaskData, get_task

BASE = "grpo"
QUALITY_FAMILIES = ("correct_pos", "correct_neg", "dlogp_pos", "dlogp_neg")
# a run has collapsed when RL left it below its warm start, or when it stopped answering in the format
COLLAPSE_FORMAT_ERROR = 0.05
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


def below_warm_start(run: dict[str, Any]) -> bool:
    """Return whether a run of results.json ended with held-out accuracy below its warm start's."""
    return run["after"]["overall"]["accuracy"] < run["before"]["overall"]["accuracy"]


def malformed(run: dict[str, Any]) -> bool:
    """Return whether more than COLLAPSE_FORMAT_ERROR of a run's greedy held-out answers after RL are malformed."""
    return run["after"]["overall"].get("format_error", 0.0) > COLLAPSE_FORMAT_ERROR


def collapsed(run: dict[str, Any]) -> bool:
    """Return whether a run of results.json collapsed: below its warm start, or malformed."""
    return below_warm_start(run) or malformed(run)


def sampled_evaluations(out: Path, results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return run name → its sampled held-out evaluation after RL (avg@k), for the runs that made one."""
    from lopti.commands.train_run import sampled_path  # here: train_run loads the trainer

    paths = {name: sampled_path(out / "runs" / name / "eval_after.json") for name in results["runs"]}
    return {name: json.loads(path.read_text()) for name, path in paths.items() if path.exists()}


def _accuracies(
    results: dict[str, Any], variant: str, sampled: dict[str, dict] | None = None, metric: str = "accuracy"
) -> dict[int, float]:
    """Return seed → held-out `metric` after RL (all groups) of the variant's runs: greedy, or from `sampled`."""
    runs = {name: run for name, run in results["runs"].items() if run["variant"] == variant}
    if sampled is None:
        return {run["seed"]: run["after"]["overall"][metric] for run in runs.values()}
    return {run["seed"]: sampled[name]["overall"][metric] for name, run in runs.items() if name in sampled}


def _problems(results: dict[str, Any], sampled: dict[str, dict] | None) -> int | None:
    """Return how many held-out problems the evaluations scored (None when they do not say)."""
    evaluations = [run["after"] for run in results["runs"].values()] if sampled is None else list(sampled.values())
    return next((e["overall"]["n"] for e in evaluations if "n" in e["overall"]), None)


def _interval_cell(values: list[float]) -> str:
    if not values:
        return "–"
    cell = interval([100 * v for v in values])
    if cell["low"] is None:
        return f"{cell['mean']:.1f} (1 seed)"
    return f"{cell['mean']:.1f} [{cell['low']:.1f}, {cell['high']:.1f}]"


def threshold_batches(
    out: Path, results: dict[str, Any], variant: str, metric: str, threshold: float
) -> list[int | None]:
    """Return per run of the variant that logged `metric` the first generated batch at which its moving mean
    over THRESHOLD_WINDOW batches reaches `threshold` (None: never)."""
    curves = variant_curves(out, results, variant, metric)
    return [first_batch_reaching(curve, threshold, THRESHOLD_WINDOW) for curve in curves.values() if curve]


def ablation_table(out: Path, results: dict[str, Any], sampled: dict[str, dict], metric: str, threshold: float) -> str:
    """Return per variant: held-out accuracy after RL (all groups) in %, mean [95% t-interval] over seeds,
    greedy and sampled (when evaluated); the mean batch at which training accuracy reached `threshold` with
    how many runs never did; and how many runs collapsed."""
    sampling_head = f" {_sampled_title(sampled)} |" if sampled else ""
    head = f"| variant | seeds | greedy |{sampling_head} batches to training accuracy ≥ {threshold:g} | collapsed |"
    lines = [head, "|---" * (6 if sampled else 5) + "|"]
    for variant in results["summary"]:
        runs = [run for run in results["runs"].values() if run["variant"] == variant]
        greedy = _interval_cell(list(_accuracies(results, variant).values()))
        sampling = f" {_interval_cell(list(_accuracies(results, variant, sampled).values()))} |" if sampled else ""
        batches = threshold_batches(out, results, variant, metric, threshold)
        reached = [b for b in batches if b is not None]
        steps = f"{statistics.fmean(reached):.1f}" if reached else "never"
        steps = f"{steps} ({len(batches) - len(reached)}/{len(batches)} never)" if batches else "–"
        fallen = f"{sum(collapsed(run) for run in runs)}/{len(runs)}"
        if any(collapsed(run) for run in runs):  # which criterion: a format failure is not a fall in accuracy
            fallen += f" ({sum(map(below_warm_start, runs))} below, {sum(map(malformed, runs))} malformed)"
        lines.append(f"| {variant} | {len(runs)} | {greedy} |{sampling} {steps} | {fallen} |")
    return "\n".join(lines) + "\n"


def _sampled_title(sampled: dict[str, dict]) -> str:
    first = next(iter(sampled.values()))
    return f"sampled avg@{first['samples']} (T={first['temperature']:g})"


def decodings(sampled: dict[str, dict]) -> dict[str, tuple[dict[str, dict] | None, str]]:
    """Return the held-out scores a study compares: title → (sampled evaluations or None for greedy, metric)."""
    found = {"greedy accuracy": (None, "accuracy")}
    if sampled:
        title = _sampled_title(sampled)
        found[f"{title} accuracy"] = (sampled, "accuracy")
        k = next(iter(sampled.values()))["samples"]
        if all(f"pass@{k}" in e["overall"] for e in sampled.values()) and k > 1:
            found[f"{title} pass@{k}"] = (sampled, f"pass@{k}")
    return found


def against_base(results: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the comparisons of results.md's paired tables: every variant against GRPO."""
    return [(variant, BASE) for variant in results["summary"] if variant != BASE]


def paired_table(
    results: dict[str, Any],
    source: dict[str, dict] | None,
    metric: str = "accuracy",
    comparisons: list[tuple[str, str]] | None = None,
) -> str:
    """Return per comparison (variant, base; default `against_base`) the variant's held-out `metric` minus the
    base's, seed by seed on the seeds both finished, in points: mean [95% bootstrap interval over seeds and
    held-out problems], the exact sign-flip p, the p after Holm's correction over the table's rows (one family),
    the seeds above / below / equal, and the smallest difference these seeds would detect at 80% power. A study
    without GRPO gets one line saying so."""
    if comparisons is None and BASE not in results["summary"]:
        return f"No `{BASE}` variant in this study, so no paired differences from GRPO.\n"
    problems = _problems(results, source)
    scores = {v: _accuracies(results, v, source, metric) for v in results["summary"]}
    rows = {(v, b): paired_difference(scores[v], scores[b], problems) for v, b in comparisons or against_base(results)}
    adjusted = dict(zip(rows, holm([None if p is None else p.p_value for p in rows.values()]), strict=True))
    head = "| comparison | seeds paired | difference [95% interval] | sign-flip p | Holm p | above / below / equal |"
    lines = [head + " detectable |", "|---" * 7 + "|"]
    for (variant, base), paired in rows.items():
        name = f"{variant} − {base}"
        if paired is None:
            lines.append(f"| {name} | 0 | – (no common seed) | – | – | – | – |")
            continue
        cell = f"{100 * paired.mean:+.1f}"
        cell += " (1 seed)" if paired.low is None else f" [{100 * paired.low:+.1f}, {100 * paired.high:+.1f}]"
        power = "–" if paired.detectable is None else f"±{100 * paired.detectable:.1f}"
        holm_p = f"{adjusted[variant, base]:.3f}" + (" *" if adjusted[variant, base] <= ALPHA else "")
        signs = f"{paired.above} / {paired.below} / {paired.equal}"
        lines.append(f"| {name} | {len(paired.seeds)} | {cell} | {paired.p_value:.3f} | {holm_p} | {signs} | {power} |")
    return "\n".join(lines) + "\n"


def collapse_table(results: dict[str, Any]) -> str:
    """Return per variant how many runs collapsed against GRPO's, with Fisher's exact p and Holm's over the rows."""
    if BASE not in results["summary"]:
        return ""
    counts = {}
    for variant in results["summary"]:
        runs = [run for run in results["runs"].values() if run["variant"] == variant]
        counts[variant] = (sum(collapsed(run) for run in runs), len(runs))
    base_fallen, base_runs = counts.pop(BASE)
    p_values = {v: fisher_p(fallen, runs, base_fallen, base_runs) for v, (fallen, runs) in counts.items()}
    adjusted = dict(zip(p_values, holm(list(p_values.values())), strict=True))
    lines = ["| variant | collapsed | GRPO collapsed | Fisher p | Holm p |", "|---" * 5 + "|"]
    for variant, (fallen, runs) in counts.items():
        counted = f"{fallen}/{runs} | {base_fallen}/{base_runs}"
        lines.append(f"| {variant} | {counted} | {p_values[variant]:.3f} | {adjusted[variant]:.3f} |")
    return "\n".join(lines) + "\n"


def paired_sections(results: dict[str, Any], sampled: dict[str, dict]) -> list[str]:
    """Return results.md's paired comparisons: a table per held-out score (each a family for Holm), the
    collapse counts, and what the tests can and cannot show."""
    parts = []
    for title, (source, metric) in decodings(sampled).items():
        parts += [f"Paired difference from GRPO, {title} (same seed, same held-out set), in points:", ""]
        parts.append(paired_table(results, source, metric))
    seeds = max((summary["seeds"] for summary in results["summary"].values()), default=0)
    parts += [
        "- Interval: 95% percentile bootstrap that resamples the seeds and the held-out problems (the set's "
        "sampling error is common to every seed, so it does not average out over them; without per-problem "
        "records each arm's set is redrawn as a binomial count, which ignores that the arms share problems and "
        "so errs wide).",
        "- Sign-flip p: the exact two-sided permutation test of the mean paired difference (all 2ⁿ sign patterns "
        f"of the n seeds' differences); with n seeds it cannot go below 2 / 2ⁿ ({smallest_p(seeds):.3f} for "
        f"{seeds}). Holm p: adjusted over this table's rows; * where it is at most {ALPHA:g}.",
        "- Detectable: the smallest true difference a paired t-test of these seeds finds four times in five "
        f"(two-sided, {ALPHA:g}), with the observed spread of the differences taken as the true one (noncentral t). "
        "A difference below it can be missed; the sign-flip test needs at least as much.",
        "",
    ]
    collapses = collapse_table(results)
    if collapses:
        parts += ["Collapsed runs against GRPO's (Fisher's exact test, two-sided):", "", collapses]
    return parts


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
    metric = get_task(base.get("task") or TaskData().task).accuracy_metric()
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
            "Held-out accuracy after RL (all groups) in %, mean [95% interval] over seeds; training accuracy; "
            "collapses:",
            "",
            ablation_table(out, results, sampled, metric, TRAIN_ACCURACY_THRESHOLD),
            "- Interval: mean ± t(0.975, n − 1) · s / √n over the n seeds (Student t, s the sample standard "
            "deviation); (1 seed): no interval from one seed.",
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
