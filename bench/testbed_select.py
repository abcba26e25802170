"""Choose the default recipe's RL learning rate on a validation split, by the rule fixed before any result.

The rule (also in docs/results.md, "The default testbed"): each candidate learning rate runs the default
`lopti train` (the shipped warm start, GRPO + AR + Lopti, 30 generated batches) for each of SEEDS, with its
held-out set replaced by a validation split: 450 three-person puzzles of training forms that are in neither
of the warm start's SFT stages nor the RL prompts. Greedy validation accuracy is measured before and after.
A candidate passes if its smaller gain over the seeds is ≥ 10 points and no run's training reward over its
last 5 batches is more than COLLAPSE_MARGIN below its first 5 (no collapse). Among passing candidates the
largest mean gain wins; within 1 point, the smaller learning rate. The held-out set is used only for the
chosen one (the robustness runs).

Runs are kept in --out, so a rerun does only what is missing. Run (two processes of one thread, then the table):
  for s in 2 3; do OMP_NUM_THREADS=1 python bench/testbed_select.py --out results/testbed-select --only-seed $s & done
  wait; python bench/testbed_select.py --out results/testbed-select
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from datasets import Dataset

from lopti.cli import main as lopti
from lopti.commands import train_run
from lopti.commands.files import write_atomic
from lopti.models.warmstart import WarmStartConfig, stage_records
from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.logic import canonical_key
from lopti.tasks.kk.prompts import trainer_prompt

CANDIDATES = (1e-4, 2e-4)  # round 4's grid; rounds 1 and 2 ran 5e-5, 1e-4, 2e-4, round 3 1e-4, 2e-4, 4e-4
SEEDS = (2, 3)  # round 4's; rounds 1-3 ran 0, 1
VALIDATION_PUZZLES, VALIDATION_SEED = 450, "testbed-validation"
MIN_GAIN, TIE = 10.0, 1.0  # points
COLLAPSE_MARGIN = 0.4  # reward: two standard errors of a 5-batch mean difference (round 3's spread); rounds 1-3: 0
RECIPE = dict(people="3", template="terse", train_puzzles=2000, data_seed=0)  # configs/kk-tiny-cpu.yaml's data


def validation_rows() -> list[dict]:
    """Return 450 training-form puzzles that neither the warm start nor the RL prompts contain."""
    warm = WarmStartConfig()
    sft = [*stage_records(warm, "reason"), *stage_records(warm, "answer")]
    rl = kk_records(RECIPE["people"], train=RECIPE["train_puzzles"], test=0, seed=RECIPE["data_seed"])["train"]
    seen = {canonical_key(r["statements"]) for r in [*sft, *rl]}
    drawn = kk_records("3", train=20 * VALIDATION_PUZZLES, test=0, seed=VALIDATION_SEED, template="terse",
                       fixed_names=True)["train"]  # fmt: skip
    fresh = [r for r in drawn if canonical_key(r["statements"]) not in seen][:VALIDATION_PUZZLES]
    if len(fresh) < VALIDATION_PUZZLES:
        raise SystemExit(f"only {len(fresh)} validation puzzles outside the training data; draw more")
    keep = ("id", "people", "names", "solution", "roles")
    return [{"prompt": trainer_prompt(r["prompt"], "terse"), **{k: r[k] for k in keep}} for r in fresh]


def mean_reward(metrics: Path, first: bool) -> float:
    """Return the mean training reward over the first or last 5 generated batches' logs."""
    rewards = [row["reward"] for row in map(json.loads, metrics.read_text().splitlines()) if "reward" in row]
    return statistics.mean(rewards[:10] if first else rewards[-10:])  # two logs (Lopti phases) per batch


def run(out: Path, learning_rate: float, seed: int, validation: Dataset) -> dict:
    """Train one candidate run (or reuse it) and return its validation gain and reward trend."""
    folder = out / f"lr{learning_rate:g}-seed{seed}"
    if not (folder / "eval_after.json").is_file():
        datasets = train_run.task_datasets
        train_run.task_datasets = lambda run_config: (datasets(run_config)[0], validation)
        try:
            argv = ["train", "--learning_rate", str(learning_rate), "--seed", str(seed), "--eval_samples", "0",
                    "--output_dir", str(folder)]  # fmt: skip
            if lopti([*argv, "--resume"] if (folder / "config.yaml").is_file() else argv) != 0:
                raise SystemExit(f"{folder}: lopti train failed")
        finally:
            train_run.task_datasets = datasets
    accuracy = {
        name: 100 * json.loads((folder / f"eval_{name}.json").read_text())["overall"]["accuracy"]
        for name in ("before", "after")
    }
    metrics = folder / "metrics.jsonl"
    return {
        "learning_rate": learning_rate,
        "seed": seed,
        "before": accuracy["before"],
        "after": accuracy["after"],
        "gain": accuracy["after"] - accuracy["before"],
        "reward_first": mean_reward(metrics, first=True),
        "reward_last": mean_reward(metrics, first=False),
    }


def choose(runs: list[dict]) -> tuple[float | None, dict]:
    """Apply the rule: return the chosen learning rate (None if no candidate passes) and each one's summary."""
    summary = {}
    for learning_rate in CANDIDATES:
        mine = [r for r in runs if r["learning_rate"] == learning_rate]
        gains = [r["gain"] for r in mine]
        summary[learning_rate] = {
            "mean_gain": statistics.mean(gains),
            "min_gain": min(gains),
            "collapsed": sum(r["reward_last"] < r["reward_first"] - COLLAPSE_MARGIN for r in mine),
        }
    passing = [lr for lr, s in summary.items() if s["min_gain"] >= MIN_GAIN and s["collapsed"] == 0]
    if not passing:
        return None, summary
    best = max(summary[lr]["mean_gain"] for lr in passing)
    return min(lr for lr in passing if summary[lr]["mean_gain"] >= best - TIE), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only-seed", type=int, help="train only this seed's runs (two processes share the work)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "validation.json"  # about 100 s to draw: kept for the other invocations
    if not saved.is_file():
        write_atomic(saved, json.dumps(validation_rows()))
    validation = Dataset.from_list(json.loads(saved.read_text()))
    if args.only_seed is not None:
        for lr in CANDIDATES:
            run(args.out, lr, args.only_seed, validation)
        return
    runs = [run(args.out, lr, seed, validation) for lr in CANDIDATES for seed in SEEDS]
    chosen, summary = choose(runs)
    lines = ["| learning rate | seed | validation greedy before → after | gain | reward first → last 5 batches |",
             "|---|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {r['learning_rate']:g} | {r['seed']} | {r['before']:.1f} → {r['after']:.1f}% | {r['gain']:+.1f} | "
        f"{r['reward_first']:.2f} → {r['reward_last']:.2f} |"
        for r in runs
    ]
    lines += ["", "| learning rate | mean gain | min gain | collapsed runs |", "|---|---|---|---|"]
    lines += [
        f"| {lr:g} | {s['mean_gain']:+.1f} | {s['min_gain']:+.1f} | {s['collapsed']} |" for lr, s in summary.items()
    ]
    lines += ["", f"chosen: {chosen:g}" if chosen is not None else "chosen: none passes the rule"]
    (args.out / "selection.md").write_text("\n".join(lines) + "\n")
    (args.out / "selection.json").write_text(json.dumps({"runs": runs, "chosen": chosen}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
