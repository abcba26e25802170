"""AR's dose–response on the default recipe: held-out accuracy against AR's α, with the checks that say whether the
reweighting moved the gradient at all. The plan (results/ar-dose/plan.md) fixes the arms, doses, seeds, outcome and
tests; this script runs it and analyses it, and refuses to run before the plan is committed or on another CPU kind.

Arms (each run `lopti train` on configs/math-smollm2-ar-cpu.yaml with `--seed S --ar_alpha A`, held-out 200
problems greedy and 200 × 2 sampled at T = 0.7, answer-token probabilities counted):
- `norm1`: the recipe's gradient clipping (max_grad_norm 1.0), α ∈ {0, 0.3, 0.6, 0.9}: the primary arm;
- `norm10`: max_grad_norm 10, which the 20 default-recipe runs on record never reached (largest norm 2.2),
  α ∈ {0, 0.9}: whether clipping, active on about half the steps at 1.0, absorbs the reweighting.

Runs go one at a time, seed by seed (all six runs of a seed before the next), into results/ar-dose/runs/; a rerun
skips finished runs and resumes an interrupted one, so the study runs in parts. Weights are deleted once a run's
records are written. Then the analysis (results.md, summary.json):
  OMP_NUM_THREADS=2 python bench/ar_dose.py --run [--max_runs N]
  python bench/ar_dose.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from lopti.cpu.precision import cpu_kind
from lopti.experiments.dose import DoseResponse, dose_response
from lopti.experiments.statistics import PairedDifference, paired_difference
from lopti.files import write_atomic
from lopti.run_folder import last_complete_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONFIG, OUT = ROOT / "configs" / "math-smollm2-ar-cpu.yaml", ROOT / "results" / "ar-dose"
SEEDS = tuple(range(100, 112))
ARMS = {"norm1": (1.0, (0.0, 0.3, 0.6, 0.9)), "norm10": (10.0, (0.0, 0.9))}  # max_grad_norm, AR's α values
HELD_OUT = ["--eval_puzzles", "200", "--eval_sampled_prompts", "200", "--eval_token_probabilities", "true"]
CPU_KIND = "amx"  # the plan's: bf16 native (AMX), as `lopti train` picks it there
LOW = "[0.00,0.25)"  # the paper's low-probability tokens: π < 0.25


def run_name(arm: str, alpha: float, seed: int) -> str:
    return f"{arm}-a{alpha:g}-s{seed}"


def planned() -> list[tuple[str, float, int]]:
    """Return every run of the plan, in the order they are trained: seed by seed."""
    return [(arm, alpha, seed) for seed in SEEDS for arm, (_, alphas) in ARMS.items() for alpha in alphas]


def check_plan_committed() -> None:
    """Stop unless the plan is in git's history and unchanged: the runs must come after it."""
    plan = OUT / "plan.md"
    tracked = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", "-1", "--", str(plan)],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", str(plan)],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    if not tracked or changed:
        raise SystemExit(f"{plan}: commit the plan, unchanged, before its first run")


def train(arm: str, alpha: float, seed: int) -> None:
    """Train one run, or resume it, then delete its weights (its records stay)."""
    norm, _ = ARMS[arm]
    folder = OUT / "runs" / run_name(arm, alpha, seed)
    argv = ["train", "--config", str(CONFIG), "--seed", str(seed), "--ar_alpha", str(alpha), "--max_grad_norm",
            str(norm), *HELD_OUT, "--report_to", "none", "--output_dir", str(folder)]  # fmt: skip
    # a run stopped before its first checkpoint starts over; one with a checkpoint or a finished training resumes
    resumable = last_complete_checkpoint(folder) is not None or (folder / "run.json").is_file()
    # a process of its own per run: the run.json names the code that process loaded, and no memory carries over
    command = [sys.executable, "-m", "lopti.cli", *argv, *(["--resume"] if resumable else [])]
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"{folder}: lopti train failed")
    shutil.rmtree(folder / "final", ignore_errors=True)
    for checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)


def finished(folder: Path) -> bool:
    return (folder / "report.md").is_file()


def steps(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


def manipulation(folder: Path, norm: float) -> dict:
    """Return the run's manipulation checks from its records: AR's weights (1 without AR), the gradient share of the
    π < 0.25 tokens before and after reweighting, the share of steps whose gradient norm clipping cut, and the held-out
    answers' token shares per probability quartile, before and after RL."""
    rows = [row for row in steps(folder) if "grad_norm" in row]
    weights = [row for row in rows if "ar/weight_mean" in row]
    checks = {
        "ar_weight_min": min((row["ar/weight_min"] for row in weights), default=1.0),
        "ar_weight_mean": statistics.fmean(row["ar/weight_mean"] for row in weights) if weights else 1.0,
        "ar_weight_max": max((row["ar/weight_max"] for row in weights), default=1.0),
        "grad_share_low_plain": statistics.fmean(row[f"probs/plain_grad_share_{LOW}"] for row in rows),
        "grad_share_low_reweighted": statistics.fmean(row[f"probs/grad_share_{LOW}"] for row in rows),
        "token_share_low_rollouts": statistics.fmean(row[f"probs/share_{LOW}"] for row in rows),
        "clipped_steps": sum(row["grad_norm"] > norm for row in rows) / len(rows),
        "grad_norm_max": max(row["grad_norm"] for row in rows),
    }
    for when in ("before", "after"):
        shares = json.loads((folder / f"eval_{when}_sampled.json").read_text())["token_probability_shares"]
        checks[f"held_out_token_shares_{when}"] = shares
    return checks


def record(arm: str, alpha: float, seed: int) -> dict:
    """Return one finished run's outcomes, manipulation checks, hardware and code version."""
    folder = OUT / "runs" / run_name(arm, alpha, seed)
    result = {"run": folder.name, "arm": arm, "alpha": alpha, "seed": seed}
    for when in ("before", "after"):
        sampled = json.loads((folder / f"eval_{when}_sampled.json").read_text())
        greedy = json.loads((folder / f"eval_{when}.json").read_text())
        result[f"sampled_{when}"] = 100 * sampled["overall"]["accuracy"]
        result[f"pass_{when}"] = 100 * sampled["overall"]["pass@2"]
        result[f"greedy_{when}"] = 100 * greedy["overall"]["accuracy"]
        result[f"length_{when}"] = sampled["overall"]["length"]
    summary = json.loads((folder / "run.json").read_text())
    result |= manipulation(folder, ARMS[arm][0])
    result |= {
        "cpu_kind": summary["hardware"]["cpu_kind"],
        "code": summary["code"],
        "seconds": summary["train_seconds"],
    }
    return result


def per_problem(arm: str, alpha: float, seed: int) -> np.ndarray:
    """Return the run's sampled accuracy per held-out problem (avg@2), in the held-out set's order."""
    folder = OUT / "runs" / run_name(arm, alpha, seed)
    records = json.loads((folder / "eval_after_sampled.json").read_text())["records"]
    return np.array([100 * statistics.fmean(r["correct"]) for r in records])


def scores_of(arm: str) -> dict[float, dict[int, np.ndarray]]:
    """Return the arm's per-problem sampled accuracies of its finished runs, by α and seed."""
    done = [run for run in planned() if run[0] == arm and finished(OUT / "runs" / run_name(*run))]
    return {alpha: {seed: per_problem(arm, alpha, seed) for _, a, seed in done if a == alpha} for alpha in ARMS[arm][1]}


def interval(result: PairedDifference) -> str:
    """Return the mean with its bootstrap interval over seeds and problems (none with a single seed)."""
    bounds = result.over_problems or result.over_seeds
    return f"{result.mean:+.2f} " + (f"[{bounds[0]:+.2f}, {bounds[1]:+.2f}]" if bounds else "[n/a: one seed]")


def slope_lines(arm: str, response: DoseResponse) -> list[str]:
    """Return the arm's slope test and its doses against α = 0."""
    slope = response.slope
    if slope is None:
        return [f"{arm}: no seed has finished every α yet."]
    lines = [
        f"{arm}, {len(slope.seeds)} seeds with every α: slope of sampled avg@2 on α {interval(slope)} points per "
        f"unit α (95% bootstrap over seeds and problems), {slope.above} seeds up, {slope.below} down; exact sign-flip "
        f"p = {slope.p_value:.3f}; detectable at 80% power with this spread: "
        + (f"{slope.detectable:.2f}" if slope.detectable else "n/a"),
        "",
        "| α vs 0 | seeds | mean difference [95%] | above / below | p | Holm p |",
        "|---|---|---|---|---|---|",
    ]
    for alpha, result in response.against_lowest.items():
        if result is not None:
            lines.append(
                f"| {alpha:g} | {len(result.seeds)} | {interval(result)} | {result.above} / {result.below} | "
                f"{result.p_value:.3f} | {response.holm_p[alpha]:.3f} |"
            )
    return lines


def checks_table(records: list[dict]) -> list[str]:
    """Return the manipulation checks per arm and α, as means over the runs (ranges for AR's weights)."""
    lines = [
        "| arm, α | runs | AR weight min / mean / max | grad share π<0.25 plain → reweighted | clipped steps | "
        "held-out tokens π<0.25 before → after | sampled before → after |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, (_, alphas) in ARMS.items():
        for alpha in alphas:
            mine = [r for r in records if r["arm"] == arm and r["alpha"] == alpha]
            if not mine:
                continue

            def mean(key: str, runs: list[dict] = mine) -> float:
                return statistics.fmean(r[key] for r in runs)

            held = [statistics.fmean(r[f"held_out_token_shares_{w}"][LOW] for r in mine) for w in ("before", "after")]
            lines.append(
                f"| {arm}, α {alpha:g} | {len(mine)} | {min(r['ar_weight_min'] for r in mine):.3f} / "
                f"{mean('ar_weight_mean'):.3f} / {max(r['ar_weight_max'] for r in mine):.3f} | "
                f"{100 * mean('grad_share_low_plain'):.1f}% → {100 * mean('grad_share_low_reweighted'):.1f}% | "
                f"{100 * mean('clipped_steps'):.0f}% | {100 * held[0]:.1f}% → {100 * held[1]:.1f}% | "
                f"{mean('sampled_before'):.1f} → {mean('sampled_after'):.1f} |"
            )
    return lines


def analyse() -> str:
    """Write results.md and summary.json from the finished runs; return results.md's text."""
    records = [record(*run) for run in planned() if finished(OUT / "runs" / run_name(*run))]
    primary = dose_response(scores_of("norm1"))
    unclipped = scores_of("norm10")
    clipping = paired_difference(unclipped[0.9], unclipped[0.0])
    kinds = sorted({r["cpu_kind"] for r in records})
    commits = sorted({(r["code"]["commit"] or "none")[:12] + ("+changes" if r["code"]["modified"] else "")
                      for r in records})  # fmt: skip
    lines = [
        "# AR's dose–response on the default recipe",
        "",
        f"Plan: [plan.md](plan.md). Command: `OMP_NUM_THREADS=2 python bench/ar_dose.py --run`, then "
        f"`python bench/ar_dose.py`. {len(records)} of {len(planned())} planned runs finished; CPU kinds: "
        f"{', '.join(kinds) or 'none'}; code versions: {', '.join(commits) or 'none'}.",
        "",
        "## Primary: the slope of sampled accuracy on α (arm norm1)",
        "",
        *slope_lines("norm1", primary),
        "",
        "## Clipping: α 0.9 against 0 with max_grad_norm 10 (arm norm10)",
        "",
        (f"{len(clipping.seeds)} seeds: {interval(clipping)} points, {clipping.above} up / {clipping.below} down, "
         f"exact sign-flip p = {clipping.p_value:.3f}." if clipping else "No seed has finished both α yet."),
        "",
        "## Manipulation checks (means over runs)",
        "",
        *checks_table(records),
    ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    write_atomic(OUT / "summary.json", json.dumps(records, indent=1))
    write_atomic(OUT / "results.md", text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="train the planned runs that are not finished")
    parser.add_argument("--max_runs", type=int, default=None, help="with --run: stop after this many runs")
    args = parser.parse_args()
    if args.run:
        check_plan_committed()
        if cpu_kind() != CPU_KIND:
            raise SystemExit(f"this CPU is {cpu_kind()}; the plan's runs all train on {CPU_KIND}")
        todo = [run for run in planned() if not finished(OUT / "runs" / run_name(*run))]
        for run in todo[: args.max_runs]:
            train(*run)
        return
    print(analyse())


if __name__ == "__main__":
    main()
