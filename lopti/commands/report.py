"""report.md for a run: held-out accuracy before and after RL, and the training curves as PNG (rewards, the
gradient share per probability bucket, and the update quality when the run logged it)."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path
from typing import Any

from lopti.diagnostics.plots import plot_update_quality
from lopti.evaluation.scoring import paired_interval, per_prompt
from lopti.files import write_atomic
from lopti.run_folder import read_metrics


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


def curve_window(points: int) -> int:
    """Return the moving mean's window for a curve of `points` batches: a tenth of the run, at least 3 batches."""
    return min(points, max(3, points // 10))


def batch_noise(values: list[float]) -> float:
    """Return the standard deviation of one batch's value about the curve's level, from successive differences
    (√(mean squared difference / 2)): a slow trend barely inflates it, unlike the values' own spread."""
    if len(values) < 2:
        return 0.0
    return math.sqrt(statistics.fmean((b - a) ** 2 for a, b in itertools.pairwise(values)) / 2)


def plot_curves(metrics: list[dict[str, Any]], out: Path, keys: dict[str, str], title: str) -> Path | None:
    """Plot each metric key (label → key) against the step, with a moving mean and its 95% band (the batch noise of
    `batch_noise` over the window's batches); return the PNG path (None if none)."""
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
        window = curve_window(len(values))
        means = moving_mean(list(values), window)
        noise = batch_noise(list(values))
        half = [1.96 * noise / math.sqrt(min(i + 1, window)) for i in range(len(values))]
        axis.plot(steps, values, "o", alpha=0.4, markersize=3, label="per batch")
        axis.plot(steps, means, label=f"moving mean ({window} batches)")
        axis.fill_between(steps, [m - h for m, h in zip(means, half, strict=True)],
                          [m + h for m, h in zip(means, half, strict=True)], alpha=0.2, label="95% band")  # fmt: skip
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
    """Return a markdown table of held-out accuracy per group (the task's `group`), before and after."""
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


def categories_of(result: dict[str, Any]) -> dict[str, dict[Any, Any]]:
    """Return {category: {prompt id: its value}} of an evaluation's records: the task's group, then each key
    of its breakdown."""
    records = result.get("records") or []
    found = {result["group"]: {record["id"]: record["group"] for record in records}}
    for record in records:
        for key, value in record.get("categories", {}).items():
            found.setdefault(key, {})[record["id"]] = value
    return found


def gain_table(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Return, for each category with more than one value, accuracy before → after per value with the change's 95%
    interval paired by prompt: where the gain is. None for evaluations saved without their records."""
    old, new = per_prompt(before, "accuracy"), per_prompt(after, "accuracy")
    if old is None or new is None:
        return None
    tables = []
    for category, value_of in categories_of(after).items():
        values = sorted(set(value_of.values()))
        if len(values) < 2:  # one value: the overall figure again
            continue
        lines = [f"| {category} | prompts | before | after | change [95% interval] |", "|---|---|---|---|---|"]
        for value in values:
            ids = [key for key, found in value_of.items() if found == value and key in old]
            first, last = (100 * statistics.fmean(side[key] for key in ids) for side in (old, new))
            interval = ""
            if len(ids) > 1:
                low, high = paired_interval({key: old[key] for key in ids}, {key: new[key] for key in ids})
                interval = f" [{100 * low:+.1f}, {100 * high:+.1f}]"
            lines.append(f"| {value} | {len(ids)} | {first:.1f}% | {last:.1f}% | {last - first:+.1f} pts{interval} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables) or None


def policy_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Return the markdown table of what RL did to the policy: sampled accuracy and pass@k, then greedy accuracy,
    output length and format errors, before → after with the change and its 95% interval paired by prompt."""
    lines = ["| measure | before | after | change [95% interval] |", "|---|---|---|---|"]
    rows = []
    if "sampled" in after:
        k, temperature, n = (
            after["sampled"]["samples"],
            after["sampled"]["temperature"],
            after["sampled"]["overall"]["n"],
        )
        rows += [
            (f"**sampled accuracy** (avg@{k} at T = {temperature:g}, {n} prompts)", "sampled", "accuracy", "%"),
            (f"pass@{k} (T = {temperature:g})", "sampled", f"pass@{k}", "%"),
        ]
    rows.append((f"greedy accuracy ({after['overall']['n']} prompts)", None, "accuracy", "%"))
    if "sampled" in after:
        rows += [("output length, sampled (tokens)", "sampled", "length", ""),
                 ("format errors, sampled", "sampled", "format_error", "%")]  # fmt: skip
    rows += [
        ("output length, greedy (tokens)", None, "length", ""),
        ("format errors, greedy", None, "format_error", "%"),
    ]
    for label, part, measure, unit in rows:
        old, new = (before[part], after[part]) if part else (before, after)
        scale = 100 if unit == "%" else 1
        first, last = scale * old["overall"][measure], scale * new["overall"][measure]
        pair = per_prompt(old, measure), per_prompt(new, measure)
        interval = ""
        if None not in pair and len(pair[0].keys() & pair[1].keys()) > 1:
            low, high = paired_interval(*pair)
            interval = f" [{scale * low:+.1f}, {scale * high:+.1f}]"
        points = " pts" if unit == "%" else ""
        lines.append(f"| {label} | {first:.1f}{unit} | {last:.1f}{unit} | {last - first:+.1f}{points}{interval} |")
    return "\n".join(lines)


def reward_trend(rewards: list[float]) -> str:
    """Return a sentence on whether the batch rewards trend beyond their noise: the least-squares slope per batch
    with its 95% interval and p-value (Student's t, n − 2 degrees of freedom)."""
    if len(rewards) < 3:
        return f"With {len(rewards)} batch(es) there is no trend to test."
    if len(set(rewards)) == 1:
        return "Every batch's reward is the same: there is no trend to test."
    from scipy import stats

    fit = stats.linregress(range(len(rewards)), rewards)
    half = stats.t.ppf(0.975, len(rewards) - 2) * fit.stderr
    verdict = (
        "distinguishable from the batches' noise"
        if fit.pvalue < 0.05
        else "not distinguishable from the batches' noise at this run's size; the held-out evaluation measures the "
        "change"
    )
    return (
        f"The reward's least-squares trend is {fit.slope:+.3f} per batch [{fit.slope - half:+.3f}, "
        f"{fit.slope + half:+.3f}] (95%, p = {fit.pvalue:.2g}, {len(rewards)} batches): {verdict}."
    )


def reward_table(metrics: list[dict[str, Any]]) -> str | None:
    """Return the training reward of each generated batch with its moving mean, the mean over the first and the
    last third of the batches, and whether the trend is distinguishable from noise (None if no batch logged a
    reward)."""
    rewards = [(m["step"], m["reward"]) for m in metrics if "reward" in m]
    if not rewards:
        return None
    values = [reward for _, reward in rewards]
    window = curve_window(len(values))
    means = moving_mean(values, window)
    lines = [f"| step | reward | moving mean ({window}) |", "|---|---|---|"]
    lines += [f"| {step} | {reward:.3f} | {mean:.3f} |" for (step, reward), mean in zip(rewards, means, strict=True)]
    third = max(1, len(rewards) // 3)
    first, last = statistics.fmean(values[:third]), statistics.fmean(values[-third:])
    lines += ["", f"Mean reward over the first third of the batches {first:.3f}, over the last third {last:.3f}. "
              + reward_trend(values)]  # fmt: skip
    return "\n".join(lines)


def write_report(
    run_dir: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    seconds: dict[str, float],
    method: str,
    precision: str = "fp32",
) -> Path:
    """Write report.md (and its PNG curves) in `run_dir`; return its path. `method` names the method and settings,
    `precision` the arithmetic of rollout, update and evaluation."""
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
        f"Method: {method}. Precision: {precision}.",
        "",
        f"Wall time: {sum(seconds.values()):.0f} s ({timing}).",
        "",
        "## What RL did to the policy",
        "",
        "Held-out prompts never seen in training. Changes are paired by prompt, with their 95% interval.",
        "",
        policy_table(before, after),
        "",
    ]
    gains = {"greedy accuracy": gain_table(before, after)}
    if "sampled" in after:
        label = f"sampled accuracy (avg@{after['sampled']['samples']})"
        gains = {label: gain_table(before["sampled"], after["sampled"]), **gains}
    if any(gains.values()):
        parts += [
            "## Where the gain is",
            "",
            "Held-out accuracy by the task's categories, before → after, each change with its 95% interval paired by "
            "prompt.",
            "",
        ]
        parts += [line for label, table in gains.items() if table for line in (f"**{label}**", "", table, "")]
    rewards = reward_table(metrics)
    if rewards:
        parts += ["## Training reward per generated batch", "", rewards, ""]
    parts += [
        f"## Held-out accuracy by {after['group']} (greedy decoding, {after['overall']['n']} prompts)",
        "",
        eval_table(before, after),
        "",
    ]
    if "sampled" in after:
        k, temperature = after["sampled"]["samples"], after["sampled"]["temperature"]
        parts += [
            f"## Held-out accuracy by {after['group']}, {k} samples per prompt at T={temperature} (avg@{k}; pass@{k} "
            "below)",
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
            "π_old bucket (`quality/correct_*` in metrics.jsonl; docs/guides/trl.md). Above 0.5 the update moved most "
            "of a bucket's tokens the right way; dashed lines, where present, are Lopti's phase 1 alone.",
            "",
            f"![update quality]({quality.name})",
            "",
        ]
    path = run_dir / "report.md"
    write_atomic(path, "\n".join(parts))  # whole or absent: a resumed run redoes a missing report
    return path
