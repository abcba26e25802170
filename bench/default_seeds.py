"""The default recipe on its held-out set, seeds 0-4, in bf16 and in fp32: does RL improve the sampled policy on every
seed, and does the precision change the answer beyond the seed spread? Each run is `lopti train --seed S --bf16 B`
(configs/math-smollm2-ar-cpu.yaml, the learning rate chosen by bench/default_select.py). Per run the table gives
sampled accuracy (avg@2 at T = 0.7; 200 problems, or the recipe's 100 with --held_out recipe), pass@2, greedy
accuracy (500 problems, or 100), output length and format errors, before → after, and the mean training reward over
the first and the last third of the batches. A run meets the bar when its sampled and greedy gains are each ≥ 10
points, pass@2 is not below the start beyond the 95% interval of its change (paired by problem), and the reward's
last third is above its first. Per precision: the mean and the range over the seeds; bf16 − fp32 seed by seed.

Runs are kept in --out, so a rerun does only what is missing; --only takes "bf16:0,1" style lists so two
processes share the work. Then the table (also written to --out as results.md, with summary.json):
  python bench/default_seeds.py --out results/default-seeds
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from default_select import third_means

from lopti.cli import main as lopti
from lopti.evaluation.scoring import paired_interval, per_prompt
from lopti.experiments.statistics import paired_difference, smallest_p
from lopti.files import write_atomic

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "math-smollm2-ar-cpu.yaml"
SEEDS, PRECISIONS, MIN_GAIN = (0, 1, 2, 3, 4), ("bf16", "fp32"), 10.0
# the held-out sizes: "records", those of results/default-seeds (500 greedy, 200 sampled); "recipe", the recipe's own
HELD_OUT = {"records": ["--eval_puzzles", "500", "--eval_sampled_prompts", "200"], "recipe": []}


def train(out: Path, precision: str, seed: int, held_out: list[str]) -> Path:
    """Train one run (or finish or reuse it) with `held_out`'s evaluation flags; return its folder."""
    folder = out / f"{precision}-seed{seed}"
    if not (folder / "report.md").is_file():
        argv = ["train", "--config", str(CONFIG), "--seed", str(seed), "--bf16", str(precision == "bf16").lower(),
                *held_out, "--output_dir", str(folder)]  # fmt: skip
        if lopti([*argv, "--resume"] if (folder / "config.yaml").is_file() else argv) != 0:
            raise SystemExit(f"{folder}: lopti train failed")
    return folder


def summary(folder: Path) -> dict:
    """Return one run's before → after measures, reward trend, wall time and whether it meets the bar."""
    evaluations = {}
    for when in ("before", "after"):
        greedy = json.loads((folder / f"eval_{when}.json").read_text())
        evaluations[when] = greedy | {"sampled": json.loads((folder / f"eval_{when}_sampled.json").read_text())}
    result = {"run": folder.name}
    for when, evaluation in evaluations.items():
        sampled = evaluation["sampled"]["overall"]
        result |= {
            f"sampled_{when}": 100 * sampled["accuracy"], f"pass_{when}": 100 * sampled["pass@2"],
            f"greedy_{when}": 100 * evaluation["overall"]["accuracy"], f"length_{when}": sampled["length"],
            f"format_errors_{when}": 100 * sampled["format_error"],
        }  # fmt: skip
    _, high = paired_interval(*(per_prompt(evaluations[when]["sampled"], "pass@2") for when in ("before", "after")))
    result["reward_first_third"], result["reward_last_third"] = third_means(folder / "metrics.jsonl")
    result |= {
        "pass_change_high": 100 * high,
        "wall_time": next(line for line in (folder / "report.md").read_text().splitlines()
                          if line.startswith("Wall time:")),
    }  # fmt: skip
    result["meets_bar"] = (
        result["sampled_after"] - result["sampled_before"] >= MIN_GAIN
        and result["greedy_after"] - result["greedy_before"] >= MIN_GAIN
        and result["pass_change_high"] >= 0  # pass@2 not below the start beyond its interval
        and result["reward_last_third"] > result["reward_first_third"]
    )
    return result


def table(runs: list[dict]) -> str:
    """Return the markdown table of the runs, with each precision's mean and range."""
    lines = ["| run | sampled avg@2 | pass@2 | greedy | length | format errors | reward first → last third | bar |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        lines.append(
            f"| {r['run']} | {r['sampled_before']:.1f} → {r['sampled_after']:.1f} | {r['pass_before']:.1f} → "
            f"{r['pass_after']:.1f} | {r['greedy_before']:.1f} → {r['greedy_after']:.1f} | {r['length_before']:.1f}"
            f" → {r['length_after']:.1f} | {r['format_errors_before']:.1f} → {r['format_errors_after']:.1f} | "
            f"{r['reward_first_third']:.3f} → {r['reward_last_third']:.3f} | {'met' if r['meets_bar'] else 'missed'} |"
        )
    for precision in PRECISIONS:
        mine = [r for r in runs if r["run"].startswith(precision)]
        if mine:
            gains = {key: [r[f"{key}_after"] - r[f"{key}_before"] for r in mine] for key in ("sampled", "greedy")}
            lines.append(
                f"\n{precision}: {len(mine)} runs; sampled gain mean {statistics.fmean(gains['sampled']):+.1f} "
                f"(range {min(gains['sampled']):+.1f} to {max(gains['sampled']):+.1f}), greedy gain mean "
                f"{statistics.fmean(gains['greedy']):+.1f} (range {min(gains['greedy']):+.1f} to "
                f"{max(gains['greedy']):+.1f}); {sum(r['meets_bar'] for r in mine)} of {len(mine)} meet the bar."
            )
    return "\n".join(lines + precision_comparison(runs))


def precision_comparison(runs: list[dict]) -> list[str]:
    """Return the lines comparing bf16's gains with fp32's seed by seed (the same seed in both precisions), with
    the exact sign-flip p and the bootstrap interval over the seeds; none unless both ran a seed."""
    gains = {precision: {} for precision in PRECISIONS}
    for r in runs:
        precision, seed = r["run"].split("-seed")
        gains[precision][int(seed)] = {key: r[f"{key}_after"] - r[f"{key}_before"] for key in ("sampled", "greedy")}
    lines = []
    for key in ("sampled", "greedy"):
        difference = paired_difference(*({s: g[key] for s, g in gains[p].items()} for p in PRECISIONS))
        if difference is None or difference.over_seeds is None:
            continue
        low, high = difference.over_seeds
        lines.append(
            f"\nbf16 − fp32, {key} gain, seed by seed ({len(difference.seeds)} seeds): mean {difference.mean:+.1f} "
            f"points [{low:+.1f}, {high:+.1f}] (bootstrap over seeds), bf16 above on {difference.above}, below on "
            f"{difference.below}; exact sign-flip p = {difference.p_value:.3f} (the smallest "
            f"{len(difference.seeds)} seeds allow: {smallest_p(len(difference.seeds)):.3f})."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", help='runs to train here, e.g. "bf16:0,1;fp32:2"')
    parser.add_argument("--held_out", choices=sorted(HELD_OUT), default="records",
                        help="records: 500 greedy, 200 sampled problems; recipe: the recipe's own sizes")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only:
        for part in args.only.split(";"):
            precision, seeds = part.split(":")
            for seed in seeds.split(","):
                train(args.out, precision, int(seed), HELD_OUT[args.held_out])
        return
    runs = [summary(args.out / f"{p}-seed{s}") for p in PRECISIONS for s in SEEDS
            if (args.out / f"{p}-seed{s}" / "report.md").is_file()]  # fmt: skip
    write_atomic(args.out / "summary.json", json.dumps(runs, indent=1))
    write_atomic(args.out / "results.md", table(runs) + "\n")
    print(table(runs))


if __name__ == "__main__":
    main()
