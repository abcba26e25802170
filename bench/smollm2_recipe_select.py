"""Choose the learning rate of SmolLM2-135M's math recipe on a validation split, by the rule fixed before any result
(docs/results.md, "SmolLM2-135M on generated math": "The RL recipe").

Each candidate learning rate runs the recipe's `lopti train` (configs/math-smollm2-cpu.yaml: GRPO, 4 prompts × 8
completions per generated batch, BATCHES batches) for each seed, with its held-out set replaced by VALIDATION
level-1 problems of the training share that the recipe's training set does not hold (bench/smollm2_select.py's
split; its 64 are the first). Greedy validation accuracy is measured before and after. A candidate passes if its
smaller gain over the seeds is ≥ MIN_GAIN points and no run's training accuracy over its last 5 batches is more
than COLLAPSE_MARGIN below its first 5. Among passing candidates the largest mean gain wins; within TIE points the
smaller learning rate. The held-out set is used only by the chosen recipe.

Runs are kept in --out, so a rerun does only what is missing. Run (two processes of one thread, then the table):
  for s in 6 7; do OMP_NUM_THREADS=1 python bench/smollm2_recipe_select.py --out results/smollm2-recipe --only-seed $s &
  done; wait; python bench/smollm2_recipe_select.py --out results/smollm2-recipe
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from datasets import Dataset
from smollm2_select import validation_rows
from testbed_select import ROOT, gain_summary, run

from lopti.files import write_atomic
from lopti.tasks.math.data import trainer_rows

CONFIG = "configs/math-smollm2-cpu.yaml"
LEARNING_RATES, BATCHES, SEEDS = (1e-5, 2e-5, 4e-5), 16, (6, 7)
VALIDATION, LEVEL, TEMPLATE = 200, 1, "chat-example"
MIN_GAIN, TIE, COLLAPSE_MARGIN = 10.0, 2.0, 0.1  # points; points; training accuracy (a fraction)


def validation() -> Dataset:
    """Return the validation split in the trainer's format."""
    return Dataset.from_list(trainer_rows(validation_rows(LEVEL, TEMPLATE, VALIDATION), TEMPLATE))


def choose(runs: list[dict]) -> tuple[float | None, dict]:
    """Apply the rule: return the chosen learning rate (None if none passes) and each candidate's summary."""
    summary = {
        rate: gain_summary([r for r in runs if r["candidate"][0] == rate], COLLAPSE_MARGIN) for rate in LEARNING_RATES
    }
    passing = [rate for rate, s in summary.items() if s["min_gain"] >= MIN_GAIN and s["collapsed"] == 0]
    if not passing:
        return None, summary
    best = max(summary[rate]["mean_gain"] for rate in passing)
    return min(rate for rate in passing if summary[rate]["mean_gain"] >= best - TIE), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only-seed", type=int, help="train only this seed's runs (two processes share the work)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    split = validation()
    write_atomic(args.out / "validation.json", json.dumps(split.to_list()))  # what the runs were judged on

    def train(rate: float, seed: int) -> dict:
        return run(args.out, str(ROOT / CONFIG), (rate, BATCHES), seed, split, passes=1)

    if args.only_seed is not None:
        for rate in LEARNING_RATES:
            train(rate, args.only_seed)
        return
    runs = [train(rate, seed) for rate in LEARNING_RATES for seed in SEEDS]
    chosen, summary = choose(runs)
    lines = ["| learning rate | seed | validation greedy before → after | gain | "
             "training accuracy, first → last 5 batches |", "|---|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {r['candidate'][0]:g} | {r['seed']} | {r['before']:.1f} → {r['after']:.1f}% | {r['gain']:+.1f} | "
        f"{r['reward_first']:.2f} → {r['reward_last']:.2f} |"
        for r in runs
    ]
    lines += ["", "| learning rate | mean gain | min gain | collapsed runs |", "|---|---|---|---|"]
    lines += [
        f"| {rate:g} | {s['mean_gain']:+.1f} | {s['min_gain']:+.1f} | {s['collapsed']} |" for rate, s in summary.items()
    ]
    lines += ["", f"chosen: {chosen:g}" if chosen else "chosen: none passes the rule"]
    write_atomic(args.out / "selection.md", "\n".join(lines) + "\n")
    write_atomic(args.out / "selection.json", json.dumps({"runs": runs, "chosen": chosen}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
