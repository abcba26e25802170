"""Choose the learning rate of the default recipe (configs/math-smollm2-ar-cpu.yaml) on a validation split, by a
rule fixed before any of its results.

Candidates: learning rates LEARNING_RATES, each for BATCHES generated batches of 4 prompts × 8 completions, one
update per batch, AR α = 0.1 (the recipe as committed), trained with seed SEED (one seed per candidate: what two
CPU cores allow; the chosen recipe's own study runs seeds 0-4). Each run's held-out set is replaced by VALIDATION
level-1 problems of the training share of problem texts that the training set does not hold
(bench/smollm2_select.py's split), evaluated before and after: greedy on all of them, SAMPLES samples at the
rollout temperature (0.7) on all of them.

Rule: a candidate passes if its sampled (avg@SAMPLES) and greedy validation gains are each ≥ MIN_GAIN points and
its mean training reward over the last third of the batches is above the first third's. Among passing candidates
the largest sampled gain wins; within TIE points, the smaller learning rate. If none passes, the largest sampled
gain is chosen and the table says so. The held-out set is touched by the chosen recipe's runs only.

Runs are kept in --out, so a rerun does only what is missing. Two processes of one thread, then the table:
  OMP_NUM_THREADS=1 python bench/default_select.py --out results/default-select --only 1e-05,4e-05 &
  OMP_NUM_THREADS=1 python bench/default_select.py --out results/default-select --only 2e-05; wait
  python bench/default_select.py --out results/default-select
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from datasets import Dataset
from smollm2_select import validation_rows

from lopti.cli import main as lopti
from lopti.commands import train_run
from lopti.files import write_atomic
from lopti.tasks.math.data import trainer_rows

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "math-smollm2-ar-cpu.yaml"
LEARNING_RATES, BATCHES, SEED = (1e-5, 2e-5, 4e-5), 8, 5
VALIDATION, SAMPLES, TEMPLATE = 200, 2, "chat-example"
MIN_GAIN, TIE = 10.0, 2.0  # points


def third_means(metrics: Path) -> tuple[float, float]:
    """Return the mean training reward over the first and the last third of a run's generated batches."""
    rewards = [row["reward"] for row in map(json.loads, metrics.read_text().splitlines()) if "reward" in row]
    third = max(1, len(rewards) // 3)
    return statistics.mean(rewards[:third]), statistics.mean(rewards[-third:])


def run(out: Path, learning_rate: float, validation: Dataset) -> dict:
    """Train one candidate (or reuse its finished run); return its validation gains and reward trend."""
    folder = out / f"lr{learning_rate:g}-seed{SEED}"
    if not (folder / "eval_after.json").is_file():
        datasets = train_run.task_datasets
        train_run.task_datasets = lambda task, run_config: (datasets(task, run_config)[0], validation)
        try:
            argv = ["train", "--config", str(CONFIG), "--learning_rate", str(learning_rate), "--max_steps",
                    str(BATCHES), "--seed", str(SEED), "--eval_samples", str(SAMPLES), "--eval_sampled_prompts",
                    str(VALIDATION), "--output_dir", str(folder)]  # fmt: skip
            if lopti([*argv, "--resume"] if (folder / "config.yaml").is_file() else argv) != 0:
                raise SystemExit(f"{folder}: lopti train failed")
        finally:
            train_run.task_datasets = datasets
    result = {"learning_rate": learning_rate}
    for name in ("before", "after"):
        greedy = json.loads((folder / f"eval_{name}.json").read_text())
        sampled = json.loads((folder / f"eval_{name}_sampled.json").read_text())
        result[f"greedy_{name}"] = 100 * greedy["overall"]["accuracy"]
        result[f"sampled_{name}"] = 100 * sampled["overall"]["accuracy"]
    result["greedy_gain"] = result["greedy_after"] - result["greedy_before"]
    result["sampled_gain"] = result["sampled_after"] - result["sampled_before"]
    result["reward_first_third"], result["reward_last_third"] = third_means(folder / "metrics.jsonl")
    return result


def choose(runs: list[dict]) -> tuple[float, bool]:
    """Apply the rule: return the chosen learning rate and whether it passed."""
    passing = [
        r for r in runs
        if min(r["sampled_gain"], r["greedy_gain"]) >= MIN_GAIN and r["reward_last_third"] > r["reward_first_third"]
    ]  # fmt: skip
    pool = passing or runs
    best = max(r["sampled_gain"] for r in pool)
    return min(r["learning_rate"] for r in pool if r["sampled_gain"] >= best - TIE), bool(passing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", help="comma-separated learning rates to train here (two processes share the work)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    split = Dataset.from_list(trainer_rows(validation_rows(1, TEMPLATE, VALIDATION), TEMPLATE))
    write_atomic(args.out / "validation.json", json.dumps(split.to_list()))  # what the runs were judged on
    rates = [float(rate) for rate in args.only.split(",")] if args.only else LEARNING_RATES
    runs = [run(args.out, rate, split) for rate in rates]
    if args.only:
        return
    chosen, passed = choose(runs)
    lines = ["| learning rate | greedy before → after | sampled (avg@2) before → after | reward, first → last third |",
             "|---|---|---|---|"]  # fmt: skip
    for r in runs:
        lines.append(
            f"| {r['learning_rate']:g} | {r['greedy_before']:.1f} → {r['greedy_after']:.1f}% | "
            f"{r['sampled_before']:.1f} → {r['sampled_after']:.1f}% | "
            f"{r['reward_first_third']:.3f} → {r['reward_last_third']:.3f} |"
        )
    lines.append(f"\nchosen: learning rate {chosen:g}" + ("" if passed else " (no candidate passed the bar)"))
    write_atomic(args.out / "selection.json", json.dumps({"runs": runs, "chosen": chosen, "passed": passed}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
