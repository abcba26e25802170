"""The paired comparisons of a `lopti compare` folder's results.md: each variant's held-out scores against a
base's, seed by seed, with the exact sign-flip test, a bootstrap interval over seeds and held-out problems, Holm's
correction over each table, the detectable difference, and Fisher's test on collapses
(lopti.experiments.statistics); and, for a registered study, its primary comparisons as its plan fixed them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lopti.evaluation.scoring import pass_at_k
from lopti.experiments.plan import read_plan
from lopti.experiments.statistics import ALPHA, Scores, fisher_p, holm, paired_difference, smallest_p
from lopti.experiments.study import BASE, PLAN_FILE, collapsed


def scores(
    results: dict[str, Any], variant: str, sampled: dict[str, dict] | None = None, metric: str = "accuracy"
) -> dict[int, Scores]:
    """Return seed → held-out `metric` after RL (all groups) of the variant's runs, greedy or from `sampled`: per
    problem (an array in the held-out order) when the evaluations kept their per-prompt records, else overall."""
    runs = {name: run for name, run in results["runs"].items() if run["variant"] == variant}
    evaluations = {
        run["seed"]: run["after"] if sampled is None else sampled[name]
        for name, run in runs.items()
        if sampled is None or name in sampled
    }
    return {seed: per_problem(evaluation, metric) for seed, evaluation in evaluations.items()}


def per_problem(evaluation: dict[str, Any], metric: str) -> Scores:
    """Return an evaluation's `metric` (accuracy, or pass@k) per problem from its per-prompt records ("records",
    `lopti.evaluation.scoring.evaluate_rows`), or overall when it kept none."""
    records = evaluation.get("records")
    if not records:
        return evaluation["overall"][metric]
    if metric == "accuracy":
        return np.array([sum(record["correct"]) / len(record["correct"]) for record in records])
    k = int(metric.removeprefix("pass@"))
    return np.array([pass_at_k(len(record["correct"]), sum(record["correct"]), k) for record in records])


def problem_count(results: dict[str, Any], sampled: dict[str, dict] | None) -> int | None:
    """Return how many held-out problems the evaluations scored (None when they do not say)."""
    evaluations = [run["after"] for run in results["runs"].values()] if sampled is None else list(sampled.values())
    return next((e["overall"]["n"] for e in evaluations if "n" in e["overall"]), None)


def sampled_title(sampled: dict[str, dict], metric: str = "avg") -> str:
    first = next(iter(sampled.values()))
    return f"sampled {metric}@{first['samples']} (T={first['temperature']:g})"


def decodings(sampled: dict[str, dict]) -> dict[str, tuple[dict[str, dict] | None, str]]:
    """Return the held-out scores a study compares: title → (sampled evaluations or None for greedy, metric)."""
    found = {"greedy accuracy": (None, "accuracy")}
    if sampled:
        found[sampled_title(sampled)] = (sampled, "accuracy")
        k = next(iter(sampled.values()))["samples"]
        if all(f"pass@{k}" in e["overall"] for e in sampled.values()) and k > 1:
            found[sampled_title(sampled, "pass")] = (sampled, f"pass@{k}")
    return found


def against_base(results: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the comparisons of results.md's paired tables: every variant against GRPO."""
    return [(variant, BASE) for variant in results["summary"] if variant != BASE]


def paired_table(
    results: dict[str, Any],
    source: dict[str, dict] | None,
    metric: str = "accuracy",
    comparisons: list[tuple[str, str]] | None = None,
    alpha: float = ALPHA,
) -> str:
    """Return per comparison (variant, base; default `against_base`) the variant's held-out `metric` minus the
    base's, seed by seed on the seeds both finished, in points: mean [95% bootstrap interval over seeds and
    held-out problems], the exact sign-flip p, the p after Holm's correction over the table's rows (one family),
    the seeds above / below / equal, and the smallest difference these seeds would detect at 80% power. A study
    without GRPO gets one line saying so."""
    if comparisons is None and BASE not in results["summary"]:
        return f"No `{BASE}` variant in this study, so no paired differences from GRPO.\n"
    size = problem_count(results, source)
    by_variant = {v: scores(results, v, source, metric) for v in results["summary"]}
    pairs = comparisons or against_base(results)
    rows = {(v, b): paired_difference(by_variant[v], by_variant[b], size) for v, b in pairs}
    adjusted = dict(zip(rows, holm([None if p is None else p.p_value for p in rows.values()]), strict=True))
    head = "| comparison | seeds paired | difference | 95% interval, seeds | 95% interval, seeds × problems | "
    lines = [head + "sign-flip p | Holm p | above / below / equal | detectable (t-test) |", "|---" * 9 + "|"]
    for (variant, base), paired in rows.items():
        name = f"{variant} − {base}"
        if paired is None:
            lines.append(f"| {name} | 0 | – (no common seed) |" + " – |" * 6)
            continue
        seeds, problems_cell = (_points(i) for i in (paired.over_seeds, paired.over_problems))
        power = "–" if paired.detectable is None else f"±{100 * paired.detectable:.1f}"
        holm_p = f"{adjusted[variant, base]:.3f}" + (" *" if adjusted[variant, base] <= alpha else "")
        signs = f"{paired.above} / {paired.below} / {paired.equal}"
        lines.append(
            f"| {name} | {len(paired.seeds)} | {100 * paired.mean:+.1f} | {seeds} | {problems_cell} | "
            f"{paired.p_value:.3f} | {holm_p} | {signs} | {power} |"
        )
    return "\n".join(lines) + "\n"


def _points(interval: tuple[float, float] | None) -> str:
    return "–" if interval is None else f"[{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]"


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


def registered_section(out: Path, results: dict[str, Any], sampled: dict[str, dict]) -> list[str]:
    """Return results.md's section of a registered study: the plan's hash and its primary comparisons, tested as
    registered (nothing for an unregistered study)."""
    record = read_plan(out)
    if record is None:
        return []
    plan = record["plan"]
    head = f"Registered plan `{record['hash']}` ({PLAN_FILE}), fixed before the runs: "
    head += f"{plan['test']}; interval: {plan['interval']}; {plan['correction']} at α = {plan['alpha']:g}; "
    head += f"exclusion: {plan['exclusion']}; collapse: {plan['collapse']}."
    metric = plan["primary_metric"]
    if metric != "greedy" and not sampled:
        return [head, "", f"No run has a sampled evaluation yet, so no test of the primary metric ({metric}).", ""]
    k = next(iter(sampled.values()))["samples"] if sampled else 1
    source, key = {"greedy": (None, "accuracy"), "sampled": (sampled, "accuracy"), "pass@k": (sampled, f"pass@{k}")}[
        metric
    ]
    comparisons = [tuple(text.split(":", 1)) for text in plan["primary_comparisons"]]
    title = {"greedy": "greedy accuracy", "sampled": "sampled accuracy", "pass@k": f"sampled pass@{k}"}[metric]
    return [
        head,
        "",
        f"Primary comparisons, {title}, in points (* Holm p ≤ {plan['alpha']:g}):",
        "",
        paired_table(results, source, key, comparisons, plan["alpha"]),
    ]


def paired_sections(results: dict[str, Any], sampled: dict[str, dict]) -> list[str]:
    """Return results.md's paired comparisons: a table per held-out score (each a family for Holm), the
    collapse counts, and what the tests can and cannot show."""
    parts = []
    for title, (source, metric) in decodings(sampled).items():
        parts += [f"Paired difference from GRPO, {title} (same seed, same held-out set), in points:", ""]
        parts.append(paired_table(results, source, metric))
    seeds = max((summary["seeds"] for summary in results["summary"].values()), default=0)
    parts += [
        "- Intervals: 95% percentile bootstraps, resampling the seeds, and the seeds and the held-out problems "
        "(the set's sampling error is common to every seed, so it does not average out over them; without "
        "per-problem records each arm's set is redrawn as a binomial count, which ignores that the arms share "
        "problems and so errs wide: the true interval lies between the two).",
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
