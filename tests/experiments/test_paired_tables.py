"""Per-problem scores: from an evaluation's per-prompt records the paired tables resample the problems, pairing
them across runs."""

import numpy as np
import pytest

from lopti.evaluation.scoring import summarise
from lopti.experiments.paired_tables import paired_table, per_problem


def record(correct):
    return {"group": 3, "correct": correct, "well_formed": [True] * len(correct), "length": [5] * len(correct)}


def test_scores_per_problem_follow_the_evaluations_records():
    records = [record([0, 0, 0, 0]), record([1, 0, 0, 0]), record([1, 1, 1, 1])]
    evaluation = summarise(records, "people", 4, 1.0) | {"records": records}  # as evaluate_rows returns it
    assert per_problem(evaluation, "accuracy") == pytest.approx([0.0, 0.25, 1.0])
    assert per_problem(evaluation, "pass@4") == pytest.approx([0.0, 1.0, 1.0])
    assert per_problem(evaluation, "pass@1") == pytest.approx([0.0, 0.25, 1.0])
    assert np.mean(per_problem(evaluation, "accuracy")) == pytest.approx(evaluation["overall"]["accuracy"])
    old = {key: value for key, value in evaluation.items() if key != "records"}  # an evaluation without records
    assert per_problem(old, "accuracy") == evaluation["overall"]["accuracy"]


def test_paired_problems_give_a_tighter_interval_than_two_binomials():
    rng = np.random.default_rng(0)
    runs = {}
    for seed in range(4):
        solved = (rng.random(400) < 0.5).astype(int)
        better = solved.copy()
        better[np.flatnonzero(solved == 0)[:8]] = 1  # the variant solves 8 more problems (+2 points) per seed
        for variant, counts in (("grpo", solved), ("lopti", better)):
            overall = {"accuracy": counts.mean(), "n": 400}
            after = {"overall": overall, "samples": 1, "records": [record([int(c)]) for c in counts]}
            runs[f"{variant}-s{seed}"] = {"variant": variant, "seed": seed, "after": after}
    results = {"runs": runs, "summary": {"grpo": {}, "lopti": {}}}
    row = paired_table(results, None).splitlines()[2]
    # every seed +2.0: over seeds the interval is the point; with the problems resampled in pairs it stays
    # within about ±1.4 points (8 discordant problems of 400), where two independent binomials give about ±7
    cells = row.split(" | ")
    assert cells[:4] == ["| lopti − grpo", "4", "+2.0", "[+2.0, +2.0]"]
    low, high = (float(x) for x in cells[4].strip("[]").split(", "))
    assert 0.4 < low < 2.0 < high < 3.6
    for run in runs.values():
        del run["after"]["records"]
    unpaired = paired_table(results, None).splitlines()[2].split(" | ")[4]
    low, high = (float(x) for x in unpaired.strip("[]").split(", "))
    assert high - low > 10
