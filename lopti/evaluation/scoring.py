"""Held-out scoring: judge generated answers, accuracy per group (the task's `group`) and per category of
the task's `breakdown`, pass@k, format errors, length.

A judge that raises on an answer or outlasts `reward_timeout` stops the evaluation with one line naming it, the
exception and the answer (`lopti.bounded`, as for training rewards); with `reward_errors: skip` such an answer
counts as wrong and not well formed, and `judge_errors` says how many there were.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

from lopti.bounded import TimeLimitExceeded, call_within, check_reward_errors, over_time, raised_on
from lopti.evaluation.generation import generate, prompt_text
from lopti.tasks.completions import ended_properly, prefilled_think

# (prompt texts, answer ids) → each answer's token count per probability bucket, by the bucket's label
TokenCounter = Callable[[list[str], list[list[int]]], list[dict[str, int]]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Return the unbiased pass@k estimate from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def bounded_judge(
    judge: Callable[[str, dict], tuple[bool, bool]], errors: str = "stop", timeout: float = 0.0
) -> Callable[[str, dict], tuple[bool, bool] | None]:
    """Return `judge` stopping the run in one line when it raises or outlasts `timeout` seconds (0: no limit), or
    with `errors="skip"` returning None for an answer it raised on."""
    check_reward_errors(errors)
    what = f"judge {getattr(judge, '__name__', type(judge).__name__)!r}"

    def judged(text: str, row: dict) -> tuple[bool, bool] | None:
        try:
            return call_within(lambda: judge(text, row), timeout, what)
        except TimeLimitExceeded:
            raise over_time(what, timeout, [text]) from None
        except Exception as error:
            if errors == "stop":
                raise raised_on(what, error, text, "wrong") from error
            return None

    return judged


def judge_rows(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    judge: Callable[[str, dict], tuple[bool, bool]],
    group: str,
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
    *,
    breakdown: tuple[str, ...] = (),
    description: str = "generating",
    reward_errors: str = "stop",
    reward_timeout: float = 0.0,
    count_tokens: TokenCounter | None = None,
) -> list[dict[str, Any]]:
    """Return one record per row: its id, its `group` value, its value of each `breakdown` key it has
    (`categories`), per sample: correct, well formed, length, and the number of samples the judge raised on
    (`judge_errors`, with `reward_errors="skip"`; see the module). `description` names the decoding's progress bar.
    With `count_tokens(prompt texts, answer ids)` (`token_probabilities.answer_token_counts`), also per sample the
    answer's token count per probability bucket (`token_buckets`).

    `judge(text, row)` says whether an answer is (correct, well formed); the text includes the prompt's
    pre-filled "<think>". A completion that did not end on its end-of-sequence token is neither.
    """
    judged = bounded_judge(judge, reward_errors, reward_timeout)
    texts = [prompt_text(r["prompt"], tokenizer) for r in rows]
    completions = generate(model, tokenizer, texts, samples, temperature, max_new_tokens, batch_size, seed, description)
    buckets = iter(
        count_tokens([text for text, outs in zip(texts, completions, strict=True) for _ in outs],
                     [ids for outs in completions for _, ids in outs])
        if count_tokens else ()
    )  # fmt: skip
    records = []
    for row, text_in, outs in zip(rows, texts, completions, strict=True):
        categories = {key: row[key] for key in breakdown if row.get(key) is not None}
        record = {"id": row.get("id"), "group": row[group], "categories": categories, "correct": [],
                  "well_formed": [], "length": []}  # fmt: skip
        record["judge_errors"] = 0  # samples `judged` returned None for
        for text, ids in outs:
            ended = ended_properly(ids, tokenizer.eos_token_id, tokenizer.pad_token_id)
            verdict = judged(prefilled_think(text_in) + text, row) if ended else (False, False)
            record["judge_errors"] += verdict is None
            right, well_formed = verdict or (False, False)
            record["correct"].append(right)
            record["well_formed"].append(well_formed)
            record["length"].append(len(ids))
            if count_tokens:
                record.setdefault("token_buckets", []).append(next(buckets))
        records.append(record)
    return records


def summarise(records: list[dict[str, Any]], group: str, samples: int, temperature: float) -> dict[str, Any]:
    """Return metrics per group value, per value of each breakdown key the records carry, and overall from
    `judge_rows` records, and the samples the judge raised on.

    accuracy = mean over samples (avg@k); pass@k for k = 1 and `samples` (unbiased); format_error = share
    of samples that are not well formed; length = mean completion tokens.
    """
    by_group: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    by_category: dict[str, dict[Any, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        by_group[record["group"]].append(record)
        for key, value in record.get("categories", {}).items():  # a record without them has none
            by_category[key][value].append(record)
    errors = sum(record.get("judge_errors", 0) for record in records)  # a record without the count has none
    shares = token_shares(records)
    return ({"token_probability_shares": shares} if shares else {}) | {
        "group": group,
        "per_group": metrics_by_value(by_group, samples),
        "breakdown": {key: metrics_by_value(values, samples) for key, values in by_category.items()},
        "overall": metrics([record for group_records in by_group.values() for record in group_records], samples),
        "samples": samples,
        "temperature": temperature,
        "judge_errors": errors,
    }


def token_shares(records: list[dict[str, Any]]) -> dict[str, float] | None:
    """Return each probability bucket's share of all the answers' tokens, from the records' `token_buckets`, or
    None when the records have none."""
    totals: Counter[str] = Counter()
    for record in records:
        for counts in record.get("token_buckets", []):
            totals.update(counts)
    everything = sum(totals.values())
    return {label: count / everything for label, count in totals.items()} if everything else None


def metrics(records: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """Return the metrics of `summarise` over `records`, their number `n`, and the 95% normal interval of the
    accuracy over the prompts (`accuracy_interval`; a single prompt's is the point itself)."""
    values: dict[str, list[float]] = defaultdict(list)
    for record in records:
        correct = record["correct"]
        values["accuracy"].append(sum(correct) / len(correct))
        for k in sorted({1, samples}):
            values[f"pass@{k}"].append(pass_at_k(len(correct), sum(correct), k))
        values["format_error"] += [float(not ok) for ok in record["well_formed"]]
        values["length"] += [float(n) for n in record["length"]]
    means = {name: sum(v) / len(v) for name, v in values.items()}
    half = half_width(values["accuracy"])
    return means | {"n": len(records), "accuracy_interval": [means["accuracy"] - half, means["accuracy"] + half]}


def half_width(values: list[float], level: float = 0.95) -> float:
    """Return the half width of the `level` normal interval of the mean of `values` (0 for a single value); with the
    hundreds of prompts of a held-out set the normal quantile is the Student one to the third decimal."""
    if len(values) < 2:
        return 0.0
    return NormalDist().inv_cdf(0.5 + level / 2) * statistics.stdev(values) / math.sqrt(len(values))


def per_prompt(result: dict[str, Any], measure: str) -> dict[Any, float] | None:
    """Return {prompt id: value} of one measure of an evaluation's records ("accuracy", "pass@k", "length",
    "format_error"), or None for an evaluation saved without its records."""
    records = result.get("records")
    if not records:
        return None
    values = {}
    for record in records:
        correct = record["correct"]
        if measure == "accuracy":
            values[record["id"]] = sum(correct) / len(correct)
        elif measure.startswith("pass@"):
            values[record["id"]] = pass_at_k(len(correct), sum(correct), int(measure[len("pass@") :]))
        elif measure == "length":
            values[record["id"]] = sum(record["length"]) / len(record["length"])
        else:
            values[record["id"]] = sum(not ok for ok in record["well_formed"]) / len(record["well_formed"])
    return values


def paired_interval(before: dict[Any, float], after: dict[Any, float], level: float = 0.95) -> tuple[float, float]:
    """Return the `level` normal interval of the mean change after − before over the prompts both evaluated.

    Paired by prompt, so the prompts' own difficulty cancels (`half_width`).
    """
    changes = [after[key] - before[key] for key in before.keys() & after.keys()]
    mean, half = statistics.fmean(changes), half_width(changes, level)
    return mean - half, mean + half


def metrics_by_value(records_by_value: dict[Any, list[dict[str, Any]]], samples: int) -> dict[str, dict[str, float]]:
    """Return `metrics` of each value's records, keyed by the value as text, in the values' order."""
    return {str(value): metrics(records, samples) for value, records in sorted(records_by_value.items())}


def evaluate_rows(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    judge: Callable[[str, dict], tuple[bool, bool]],
    group: str,
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
    **options: Any,
) -> dict[str, Any]:
    """Return metrics per value of `group` (the task's `group`), per breakdown category and overall: `summarise` of
    `judge_rows` (whose keyword-only settings `options` take), with the per-prompt records under "records" (for
    intervals paired by prompt)."""
    records = judge_rows(
        model, tokenizer, rows, judge, group, samples, temperature, max_new_tokens, batch_size, seed, **options
    )
    return summarise(records, group, samples, temperature) | {"records": records}
