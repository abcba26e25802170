"""`lopti compare`'s results.md: 95% intervals, paired differences from GRPO, batches to a training-accuracy
threshold and collapses, on fabricated run folders (no training)."""

import json

from lopti.experiments import compare
from lopti.experiments.compare_report import write_compare_report

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
    base = {"max_steps": 4, "task": "kk", **(base or {})}  # the fabricated runs log K&K's accuracy
    return write_compare_report(out, results, "lopti compare", base).read_text()


def row(text, variant, table):
    """Return the row of `variant` in the table whose head line starts with `table`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(table))
    return next(line for line in lines[start:] if line.startswith(f"| {variant} |"))


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
    greedy = "Paired difference from GRPO, greedy accuracy"
    # lopti − grpo per seed: +5, +5, +5 points; the held-out set's size is unknown here, so the interval is over
    # seeds only and has width 0; all three on one side: p = 2 / 2³, and Holm over the two rows (0.25 and 1)
    lopti = "| lopti − grpo | 3 | +5.0 | [+5.0, +5.0] | – | 0.250 | 0.500 | 3 / 0 / 0 | – |"
    assert row(text, "lopti − grpo", greedy) == lopti
    assert row(text, "ar − grpo", greedy) == "| ar − grpo | 1 | +0.0 | – | – | 1.000 | 1.000 | 0 / 0 / 1 | – |"
    sampled = "Paired difference from GRPO, sampled avg@4 (T=1)"
    lopti = "| lopti − grpo | 3 | +5.0 | [+5.0, +5.0] | – | 0.250 | 0.250 | 3 / 0 / 0 | – |"
    assert row(text, "lopti − grpo", sampled) == lopti
    assert row(text, "ar − grpo", sampled) == "| ar − grpo | 0 | – (no common seed) | – | – | – | – | – | – |"
    assert "it cannot go below 2 / 2ⁿ (0.250 for 3)" in text
    fisher = "Collapsed runs against GRPO's"
    assert row(text, "lopti", fisher) == "| lopti | 1/3 | 1/3 | 1.000 | 1.000 |"
    assert "mean of `rewards/kk_accuracy/mean` over it and the 2 logged batches before it" in text
    assert "below its warm start's, or more than 5% of its greedy held-out answers are malformed" in text


def test_results_md_gives_the_warm_start_and_pass_at_k_next_to_each_variant(tmp_path):
    """The ablation table opens with the warm start's greedy, avg@k and pass@k (from the runs' evaluations before
    RL) and gives each variant's pass@k after RL beside its avg@k."""
    runs = {f"{variant}-s{seed}": (0.4, [0.3] * 3, {"sampled": 0.3}) for variant in ("grpo", "ar") for seed in (0, 1)}
    results = fake_study(tmp_path, runs)
    for name in runs:  # avg@4 and pass@4 before RL 10% and 20%, after it 30% and 50% (ar seed 1: 60%)
        folder = tmp_path / "runs" / name
        before = evaluation(0.1, samples=4, temperature=1.0)
        before["overall"]["pass@4"] = 0.2
        (folder / "eval_before_sampled.json").write_text(json.dumps(before))
        after = json.loads((folder / "eval_after_sampled.json").read_text())
        after["overall"]["pass@4"] = 0.6 if name == "ar-s1" else 0.5
        (folder / "eval_after_sampled.json").write_text(json.dumps(after))
    text = report(tmp_path, results)
    ablation = "| variant | seeds | greedy | sampled avg@4 (T=1) | sampled pass@4 (T=1) | batches to training"
    warm = "| warm start (before RL) | – | 25.0 [25.0, 25.0] | 10.0 [10.0, 10.0] | 20.0 [20.0, 20.0] | – | – |"
    assert row(text, "warm start (before RL)", ablation) == warm
    # ar's pass@4 after RL: 50 and 60, mean 55, s 7.07, half 12.706 · 7.07 / √2 = 63.5
    ar = "| ar | 2 | 40.0 [40.0, 40.0] | 30.0 [30.0, 30.0] | 55.0 [-8.5, 118.5] | never (2/2 never) | 0/2 |"
    assert row(text, "ar", ablation) == ar


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
