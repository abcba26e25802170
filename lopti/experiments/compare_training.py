"""The training side of a `lopti compare` folder's results.md: what RL did to each variant's own rollouts.

The training table gives the reward of the first and last generated batches and the update quality averaged
over the run (`update_quality_every`, lopti.train.update_quality), including the top π_old bucket's correct
ratio, which the probe (lopti.diagnostics) measures on one batch; the shares table gives the token-probability
shares (`probs/share_*`) of the first and last batch, to show where RL moved the sampled tokens.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from lopti.core.methods import parse_method
from lopti.experiments.statistics import paired_difference
from lopti.run_folder import read_metrics

TRAINING_COLUMNS = {  # metric key → column title of the training table, besides the top bucket's
    "reward": "reward",
    "quality/correct_pos_all": "correct ratio Â>0",
    "quality/correct_neg_all": "correct ratio Â<0",
}
SHARE_PREFIX = "probs/share_"


def metric_curve(run_dir: Path, key: str, passes: int) -> dict[int, float]:
    """Return generated batch → the metric's last value logged in it: optimizer step s of a run making
    `passes` update passes per batch belongs to batch ⌈s / passes⌉."""
    lines = read_metrics(run_dir / "metrics.jsonl")
    return {math.ceil(int(m["step"]) / passes): m[key] for m in lines if key in m}


def variant_curves(out: Path, results: dict[str, Any], variant: str, key: str) -> dict[str, dict[int, float]]:
    """Return run name → `metric_curve` of `key` for each run of the variant (Lopti and its controls: two passes
    per batch)."""
    passes = 2 if parse_method(variant).lopti else 1
    names = [name for name, run in results["runs"].items() if run["variant"] == variant]
    return {name: metric_curve(out / "runs" / name, key, passes) for name in names}


def _logged_keys(out: Path, results: dict[str, Any]) -> set[str]:
    logs = [read_metrics(out / "runs" / name / "metrics.jsonl") for name in results["runs"]]
    return {key for log in logs for line in log for key in line}


def _buckets(keys: set[str], prefix: str) -> list[str]:
    """Return the π_old bucket labels logged under `prefix` ("[0.00,0.25)", ...), lowest first, without "all"."""
    return sorted(key.removeprefix(prefix) for key in keys if key.startswith(prefix) and not key.endswith("_all"))


def _span(curve: dict[int, float], span: str, window: int) -> list[int]:
    steps = sorted(curve)
    return {"first": steps[:window], "last": steps[-window:]}.get(span, steps)


def _mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {spread:.3f}"


def training_table(out: Path, results: dict[str, Any], window: int = 5) -> str:
    """Return per variant the training reward of the first and the last `window` generated batches and the mean
    update quality over the run (when logged; the top π_old bucket's correct ratio among positive advantages
    too), mean ± std over seeds.

    The rollouts are sampled at the recipe's temperature, so this shows what RL changed in the policy's own
    samples even where the greedy held-out accuracy does not move."""
    columns = dict(TRAINING_COLUMNS)
    top = _buckets(_logged_keys(out, results), "quality/correct_pos_")[-1:]
    columns |= {f"quality/correct_pos_{label}": f"correct ratio Â>0, π_old in {label}" for label in top}
    spans = {"reward": ("first", "last")}  # the other columns average the whole run
    rows = []
    for variant in results["summary"]:
        cells = []
        for key in columns:
            curves = list(variant_curves(out, results, variant, key).values())
            for span in spans.get(key, ("all",)):
                if not all(curves):
                    cells.append("–")
                    continue
                cells.append(_mean_std([statistics.fmean(c[step] for step in _span(c, span, window)) for c in curves]))
        rows.append(f"| {variant} | " + " | ".join(cells) + " |")
    head = f"| variant | reward, first {window} batches | reward, last {window} batches | "
    head += " | ".join(title + " (mean)" for key, title in columns.items() if key != "reward") + " |"
    return "\n".join([head, "|---" * (len(columns) + 2) + "|", *rows]) + "\n"


def shares_table(out: Path, results: dict[str, Any]) -> str | None:
    """Return per variant each π_old bucket's share of the sampled tokens in the first and the last generated
    batch, in %, mean over seeds; None when no run logged the shares."""
    labels = _buckets(_logged_keys(out, results), SHARE_PREFIX)
    if not labels:
        return None
    rows = []
    for variant in results["summary"]:
        cells = []
        for label in labels:
            curves = [c for c in variant_curves(out, results, variant, SHARE_PREFIX + label).values() if c]
            if not curves:
                cells.append("–")
                continue
            first, last = (statistics.fmean(100 * c[pick(c)] for c in curves) for pick in (min, max))
            cells.append(f"{first:.1f} → {last:.1f}")
        rows.append(f"| {variant} | " + " | ".join(cells) + " |")
    head = "| variant | " + " | ".join(f"π_old in {label}" for label in labels) + " |"
    return "\n".join([head, "|---" * (len(labels) + 1) + "|", *rows]) + "\n"


def quality_paired_table(out: Path, results: dict[str, Any], base: str) -> str | None:
    """Return per variant its update quality minus the base's, seed by seed: the run's mean correct ratio among
    positive advantages, of the top π_old bucket and of all tokens, mean [95% bootstrap interval over seeds] and
    the exact sign-flip p over the seeds both logged it; None when no run measured update quality or there is
    no base.

    The probe (lopti.diagnostics) compares these ratios on one batch; this is the same comparison over the
    batches a run measured while it trained (`update_quality_every`)."""
    top = _buckets(_logged_keys(out, results), "quality/correct_pos_")[-1:]
    if not top or base not in results["summary"]:
        return None
    columns = {f"quality/correct_pos_{top[0]}": f"Â>0, π_old in {top[0]}", "quality/correct_pos_all": "Â>0, all"}

    def run_means(variant: str, key: str) -> dict[int, float]:
        curves = variant_curves(out, results, variant, key)
        return {results["runs"][name]["seed"]: statistics.fmean(c.values()) for name, c in curves.items() if c}

    rows = []
    for variant in results["summary"]:
        if variant == base:
            continue
        cells = []
        for key in columns:
            paired = paired_difference(run_means(variant, key), run_means(base, key))
            if paired is None:
                cells.append("–")
            elif paired.over_seeds is None:
                cells.append(f"{paired.mean:+.3f} (1 seed)")
            else:
                interval = "[{:+.3f}, {:+.3f}]".format(*paired.over_seeds)
                cells.append(f"{paired.mean:+.3f} {interval}, p = {paired.p_value:.3f}")
        rows.append(f"| {variant} | " + " | ".join(cells) + " |")
    head = "| variant | " + " | ".join(f"correct ratio {title} − {base.upper()}" for title in columns.values()) + " |"
    return "\n".join([head, "|---" * (len(columns) + 1) + "|", *rows]) + "\n"
