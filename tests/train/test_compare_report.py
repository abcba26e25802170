"""`lopti compare`'s results.md: 95% intervals, paired differences from GRPO, batches to a training-accuracy
threshold and collapses, on fabricated run folders (no training)."""

import json
import math
import statistics

import pytest

from lopti.commands import compare
from lopti.commands.compare_report import write_compare_report
from lopti.commands.compare_stats import first_batch_reaching, paired_difference, t_interval, t_quantile

KK_ACCURACY = "rewards/kk_accuracy/mean"


def evaluation(accuracy, format_error=0.0, **extra):
    stats = {"accuracy": accuracy, "format_error": format_error}
    return {"group": "people", "per_group": {"3": stats}, "overall": stats, **extra}


def fake_study(out, runs, accuracy_key=KK_ACCURACY):
    """Write a comparison folder whose runs[name] = (after, batch accuracies, extras): the warm start at 25%,
    metrics.jsonl logging the accuracy as TRL does (Lopti-style runs on the first of a batch's two steps)."""
    variants = list(dict.fromkeys(name.rsplit("-s", 1)[0] for name in runs))
    seeds = sorted({int(name.rsplit("-s", 1)[1]) for name in runs})
    (out / "compare.json").write_text(json.dumps({"base": {}, "variants": variants, "seeds": seeds}))
    for name, (after, accuracies, extra) in runs.items():
        run_dir = out / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "eval_before.json").write_text(json.dumps(evaluation(0.25)))
        (run_dir / "eval_after.json").write_text(json.dumps(evaluation(after, extra.get("format_error", 0.0))))
        if "sampled" in extra:
            sampled = evaluation(extra["sampled"], samples=4, temperature=1.0)
            (run_dir / "eval_after_sampled.json").write_text(json.dumps(sampled))
        passes = 2 if name.split("-")[0] in ("lopti", "ar+lopti", "grpo2", "lopti_random") else 1
        lines = []
        for batch, value in enumerate(accuracies, start=1):
            first = passes * (batch - 1) + 1
            lines.append({"step": first, accuracy_key: value, "reward": value})
            lines += [{"step": first + k, "loss": 0.1} for k in range(1, passes)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return compare.collect(out)


def report(out, results, base=None):
    return write_compare_report(out, results, "lopti compare", {"max_steps": 4, **(base or {})}).read_text()


def row(text, variant, table):
    """Return the row of `variant` in the table whose head line starts with `table`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(table))
    return next(line for line in lines[start:] if line.startswith(f"| {variant} |"))


def test_t_interval_is_students_over_the_seeds():
    mean, half = t_interval([0.1, 0.2, 0.4])
    # s = √(((−0.1333)² + (−0.0333)² + 0.1667²) / 2) = 0.152753; t(0.975, 2) = 4.302653; 4.302653 · s / √3
    assert mean == pytest.approx(0.233333, abs=1e-6) and half == pytest.approx(0.379458, abs=1e-6)
    assert t_interval([0.3]) == (0.3, None)
    values = [0.1 * i for i in range(6)]  # 5 degrees of freedom: t = 2.570582
    assert t_interval(values)[1] == pytest.approx(2.570582 * statistics.stdev(values) / math.sqrt(6), rel=1e-9)
    assert (t_quantile(0.975, 1), t_quantile(0.975, 30)) == (12.706205, 2.042272)
    assert t_quantile(0.975, 40) == pytest.approx(2.021075, abs=1e-4) and t_quantile(0.975, 31) < 2.042272
    assert (t_quantile(0.80, 2), t_quantile(0.80, 30)) == (1.060660, 0.853767)
    assert t_quantile(0.80, 40) == pytest.approx(0.850700, abs=1e-4)  # t's 0.80 quantile at 40 df: 0.850700
    with pytest.raises(ValueError, match="got 0"):
        t_quantile(0.975, 0)


def test_paired_differences_use_common_seeds_only_and_count_signs():
    variant = {0: 0.5, 1: 0.4, 2: 0.3, 4: 0.9}
    base = {0: 0.4, 1: 0.4, 2: 0.35, 3: 0.1}
    paired = paired_difference(variant, base)
    assert paired.seeds == [0, 1, 2] and (paired.above, paired.below, paired.equal) == (1, 1, 1)
    # differences 0.1, 0, −0.05: mean 0.016667, s 0.076376, 4.302653 · s / √3 = 0.189729
    assert paired.mean == pytest.approx(0.016667, abs=1e-6) and paired.half_width == pytest.approx(0.189729, abs=1e-6)
    assert not paired.excludes_zero()
    # 80% power: (t(0.975, 2) + t(0.80, 2)) · s / √3 = (4.302653 + 1.060660) · 0.076376 / √3 = 0.236500
    assert paired.detectable == pytest.approx(0.236500, abs=1e-6)
    clear = paired_difference({0: 0.5, 1: 0.62, 2: 0.61}, {0: 0.4, 1: 0.5, 2: 0.5})
    assert clear.excludes_zero() and (clear.above, clear.below) == (3, 0)
    assert paired_difference({0: 0.5}, {1: 0.5}) is None
    single = paired_difference({0: 0.5}, {0: 0.4})
    assert single.half_width is None and single.detectable is None


def test_first_batch_reaching_takes_the_moving_mean_over_full_windows():
    assert first_batch_reaching({1: 0.9, 2: 0.9, 3: 0.9}, 0.5) == 3  # not before three batches
    assert first_batch_reaching({1: 0.2, 2: 0.4, 3: 0.6, 4: 0.8}, 0.5) == 4  # 0.4 at batch 3, 0.6 at 4
    assert first_batch_reaching({1: 0.0, 2: 0.5, 3: 1.0}, 0.5) == 3  # reaching counts
    assert first_batch_reaching({1: 0.9, 2: 0.1, 3: 0.1, 4: 0.9}, 0.5) is None


def test_results_md_reports_intervals_paired_differences_threshold_and_collapses(tmp_path):
    climbing = [0.2, 0.4, 0.6, 0.8]  # moving mean 0.4 at batch 3, 0.6 at batch 4
    runs = {
        "grpo-s0": (0.30, [0.5, 0.5, 0.5, 0.5], {"sampled": 0.20}),  # reaches 0.5 at batch 3
        "grpo-s1": (0.40, climbing, {"sampled": 0.30}),  # at batch 4
        "grpo-s2": (0.20, [0.3] * 4, {"sampled": 0.10}),  # never; below the warm start: collapsed
        "lopti-s0": (0.35, climbing, {"sampled": 0.25}),  # logged at optimizer steps 1, 3, 5, 7: batch 4
        "lopti-s1": (0.45, climbing, {"sampled": 0.35, "format_error": 0.06}),  # malformed: collapsed
        "lopti-s2": (0.25, [0.3] * 4, {"sampled": 0.15, "format_error": 0.05}),  # at the limits: kept
        "ar-s1": (0.40, [0.9] * 4, {}),  # only seed 1 in common with GRPO
    }
    results = fake_study(tmp_path, runs)
    text = report(tmp_path, results)
    ablation = "| variant | seeds | greedy | sampled avg@4 (T=1) | batches to training accuracy ≥ 0.5 | collapsed |"
    # grpo greedy 30, 40, 20: mean 30, s 10, half 4.302653 · 10 / √3 = 24.8; sampled 20, 30, 10
    assert (
        row(text, "grpo", ablation)
        == "| grpo | 3 | 30.0 [5.2, 54.8] | 20.0 [-4.8, 44.8] | 3.5 (1/3 never) | 1/3 (1 below, 0 malformed) |"
    )
    lopti = "| lopti | 3 | 35.0 [10.2, 59.8] | 25.0 [0.2, 49.8] | 4.0 (1/3 never) | 1/3 (0 below, 1 malformed) |"
    assert row(text, "lopti", ablation) == lopti
    assert row(text, "ar", ablation) == "| ar | 1 | 40.0 (1 seed) | – | 3.0 (0/1 never) | 0/1 |"
    paired = "| variant | seeds paired | greedy − GRPO |"
    # lopti − grpo per seed: +5, +5, +5 points: interval of width 0, excluding 0
    assert row(text, "lopti", paired) == (
        "| lopti | 3 | +5.0 [+5.0, +5.0] * | 3 / 0 / 0 | ±0.0 | +5.0 [+5.0, +5.0] * | 3 / 0 / 0 | ±0.0 |"
    )
    assert row(text, "ar", paired) == "| ar | 1 | +0.0 (1 seed) | 0 / 0 / 1 | – | – (no common seed) | – | – |"
    assert "mean of `rewards/kk_accuracy/mean` over it and the 2 logged batches before it" in text
    assert "below its warm start's, or more than 5% of its greedy held-out answers are malformed" in text


def test_greedy_only_study_without_grpo_says_why_there_is_no_paired_table(tmp_path):
    runs = {"ar-s0": (0.3, [0.6] * 3, {}), "ar-s1": (0.5, [0.1] * 3, {}), "lopti-s0": (0.2, [0.6] * 3, {})}
    text = report(tmp_path, fake_study(tmp_path, runs))
    assert "No `grpo` variant in this study, so no paired differences from GRPO." in text
    assert "greedy − GRPO" not in text and "sampled avg@" not in text
    ablation = "| variant | seeds | greedy | batches to training accuracy ≥ 0.5 | collapsed |"
    assert row(text, "ar", ablation) == "| ar | 2 | 40.0 [-87.1, 167.1] | 3.0 (1/2 never) | 0/2 |"
    lopti = "| lopti | 1 | 20.0 (1 seed) | 3.0 (0/1 never) | 1/1 (1 below, 0 malformed) |"
    assert row(text, "lopti", ablation) == lopti


def test_the_threshold_follows_the_tasks_accuracy_reward(tmp_path):
    """A math study counts batches on the math accuracy reward; another reward's log is not it."""
    runs = {"grpo-s0": (0.3, [0.9] * 3, {}), "grpo-s1": (0.3, [0.1] * 3, {})}
    results = fake_study(tmp_path, runs, accuracy_key="rewards/math/mean")
    ablation = "| variant | seeds | greedy | batches"
    assert row(report(tmp_path, results, {"task": "math"}), "grpo", ablation).endswith("| 3.0 (1/2 never) | 0/2 |")
    assert row(report(tmp_path, results), "grpo", ablation).endswith("| – | 0/2 |")  # K&K's metric not logged
