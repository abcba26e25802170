"""bench/ar_dose.py: the order its runs train in, and its analysis of run folders (made up here with known
values): the manipulation checks read from metrics.jsonl and the evaluations, and the slope over seeds."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "ar_dose.py"
LOW = "[0.00,0.25)"


def load_script():
    """Return bench/ar_dose.py as a module, its OUT the committed records' folder."""
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("ar_dose", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.remove(str(SCRIPT.parent))
    return module


@pytest.fixture
def ar_dose(tmp_path, monkeypatch):
    module = load_script()
    monkeypatch.setattr(module, "OUT", tmp_path)
    monkeypatch.setattr(module, "SEEDS", (1, 2, 3))
    return module


def evaluation(correct: list[list[bool]], low_share: float | None = None) -> dict:
    """An evaluation file's content: per-problem answers, their accuracy, and the answers' token shares."""
    flat = [c for answers in correct for c in answers]
    overall = {"accuracy": sum(flat) / len(flat), "pass@2": 0.5, "length": 30.0}
    result = {"overall": overall, "records": [{"correct": answers} for answers in correct]}
    if low_share is not None:
        result["token_probability_shares"] = {LOW: low_share, "[0.25,1.00]": 1 - low_share}
    return result


def write_run(module, arm: str, alpha: float, seed: int, correct: list[list[bool]], norms: list[float]) -> None:
    folder = module.OUT / "runs" / module.run_name(arm, alpha, seed)
    folder.mkdir(parents=True)
    steps = []
    for step, norm in enumerate(norms, start=1):
        row = {"step": step, "grad_norm": norm, f"probs/plain_grad_share_{LOW}": 0.4,
               f"probs/grad_share_{LOW}": 0.4 * (1 - alpha / 2), f"probs/share_{LOW}": 0.1}  # fmt: skip
        if alpha > 0:
            row |= {"ar/weight_min": 1 - alpha + 0.01 * step, "ar/weight_mean": 0.9, "ar/weight_max": 1.0}
        steps.append(json.dumps(row))
    (folder / "metrics.jsonl").write_text("\n".join(steps) + "\n")
    for when, answers, share in (("before", [[False, False]] * len(correct), 0.08), ("after", correct, 0.06)):
        (folder / f"eval_{when}_sampled.json").write_text(json.dumps(evaluation(answers, share)))
        (folder / f"eval_{when}.json").write_text(json.dumps(evaluation(answers)))
    code = {"lopti": "0.1.0", "commit": "a" * 40, "modified": False}
    (folder / "run.json").write_text(json.dumps({"train_seconds": 1.0, "hardware": {"cpu_kind": "amx"}, "code": code}))
    (folder / "report.md").write_text("done\n")


def test_runs_train_seed_by_seed_every_dose_of_both_arms(ar_dose):
    planned = ar_dose.planned()
    assert len(planned) == 3 * 6 and planned[:6] == [
        ("norm1", 0.0, 1), ("norm1", 0.3, 1), ("norm1", 0.6, 1), ("norm1", 0.9, 1), ("norm10", 0.0, 1),
        ("norm10", 0.9, 1),
    ]  # fmt: skip


def test_the_analysis_reads_each_run_s_checks_and_tests_the_slope(ar_dose):
    # problem k is right at dose d for seed s when k < 2 + round(10·d) (+ s for the seed's own level): a slope of
    # 10 problems of 20 per unit α, +50 points, the same on every seed
    for seed in (1, 2, 3):
        for arm, (_, alphas) in ar_dose.ARMS.items():
            for alpha in alphas:
                right = 2 + round(10 * alpha) + seed
                correct = [[k < right, k < right] for k in range(20)]
                write_run(ar_dose, arm, alpha, seed, correct, norms=[0.5, 1.5, 2.0, 0.9])
    text = ar_dose.analyse()
    records = json.loads((ar_dose.OUT / "summary.json").read_text())
    assert len(records) == 18
    run = next(r for r in records if r["run"] == "norm1-a0.3-s2")
    assert run["clipped_steps"] == 0.5 and run["grad_norm_max"] == 2.0  # 1.5 and 2.0 above max_grad_norm 1
    assert run["ar_weight_min"] == pytest.approx(0.71) and run["ar_weight_max"] == 1.0
    assert run["grad_share_low_plain"] == pytest.approx(0.4) and run["grad_share_low_reweighted"] == pytest.approx(0.34)
    assert run["held_out_token_shares_before"][LOW] == 0.08 and run["held_out_token_shares_after"][LOW] == 0.06
    assert run["cpu_kind"] == "amx" and run["code"]["commit"] == "a" * 40
    unweighted = next(r for r in records if r["run"] == "norm10-a0-s1")
    assert unweighted["clipped_steps"] == 0.0  # max_grad_norm 10: none of the norms reaches it
    assert (unweighted["ar_weight_min"], unweighted["ar_weight_mean"], unweighted["ar_weight_max"]) == (1.0, 1.0, 1.0)
    # 0 → 0.3 → 0.6 → 0.9 is 3, 6, 9 more right problems of 20: 50 points per unit α on every seed; the interval
    # resamples the held-out problems too, of which only those at the seeds' thresholds carry the slope
    slope = re.search(r"slope of sampled avg@2 on α \+50\.00 \[\+([\d.]+), \+([\d.]+)\] points per unit α", text)
    assert slope and float(slope[1]) < 50 < float(slope[2])
    assert "3 seeds up, 0 down; exact sign-flip p = 0.250" in text  # 2 of the 2³ sign patterns are as extreme
    assert re.search(r"\| 0\.9 \| 3 \| \+45\.00 \[[^]]+\] \| 3 / 0 \| 0\.250 \| 0\.750 \|", text)  # Holm: ×3
    assert re.search(r"3 seeds: \+45\.00 \[[^]]+\] points, 3 up / 0 down", text)  # the norm10 arm
    assert "CPU kinds: amx; code versions: aaaaaaaaaaaa" in text


def test_a_seed_missing_a_dose_is_left_out_of_the_slope(ar_dose):
    for seed in (1, 2):
        for alpha in (0.0, 0.3, 0.6, 0.9):
            if (seed, alpha) != (2, 0.6):
                write_run(ar_dose, "norm1", alpha, seed, [[True, False]] * 4, norms=[0.5])
    assert "norm1, 1 seeds with every α" in ar_dose.analyse()


def test_the_committed_results_are_the_analysis_of_the_committed_runs(monkeypatch):
    """results/ar-dose/results.md and summary.json are what the analysis makes of the committed run records now."""
    module, written = load_script(), {}
    monkeypatch.setattr(module, "write_atomic", lambda path, text: written.__setitem__(Path(path).name, text))
    assert module.analyse() == (module.OUT / "results.md").read_text()
    assert json.loads(written["summary.json"]) == json.loads((module.OUT / "summary.json").read_text())
