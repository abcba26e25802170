"""A recipe's `lopti train` over seeds and thread counts: held-out accuracy before → after, the token shares.

Each run is the recipe (the default, or `--config`) with only `--seed` (and the torch thread count) changed, in
its own process so
OMP_NUM_THREADS takes effect. Prints, per run, held-out greedy and sampled (avg@4, T = 1) accuracy before and
after, the wall time, and, over the first 5 generated batches, the sampled response tokens' shares per π_old
quartile and the lowest quartile's share of the gradient (probs/share_*, probs/grad_share_*). Finished runs (report.md
present) are read, not rerun; one killed midway resumes.

Run (10 runs, about 45 minutes on 2 idle cores, one run at a time):
  python bench/testbed_runs.py --out results/testbed-runs --seeds 0,1,2,3,4 --threads 1,2
  python bench/testbed_runs.py --config configs/kk-tiny-varied-cpu.yaml --out results/varied-runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PAPER_SHARES = (19.2, 10.2, 10.1, 60.5)  # Fig. 1 of the paper, % of response tokens per π quartile
START_BATCHES = 5  # "the start of RL": the first generated batches, whose tokens the warm start sampled


def train(folder: Path, seed: int, threads: int, config: Path | None) -> float:
    """Run `lopti train` (on `config`, if given) in a fresh process, resuming a killed one; return its wall
    seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    argv = [sys.executable, "-m", "lopti.cli", "train", "--seed", str(seed), "--output_dir", str(folder)]
    argv += ["--config", str(config)] if config else []
    if (folder / "config.yaml").is_file():
        argv.append("--resume")
    started = time.time()
    subprocess.run(argv, env=env, check=True)
    seconds = time.time() - started
    (folder / "wall_seconds.txt").write_text(f"{seconds:.0f}\n")
    return seconds


def start_shares(metrics: Path, passes: int = 2) -> tuple[list[float], float]:
    """Return the sampled tokens' shares per π_old quartile and the lowest quartile's share of the gradient (%),
    over the first START_BATCHES generated batches of a run's metrics.jsonl (`passes` updates per batch)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    start = [row for row in rows if (row["step"] - 1) % passes == 0][:START_BATCHES]  # first pass
    quartiles = sorted(key for key in start[0] if key.startswith("probs/share_"))
    gradient = quartiles[0].replace("share_", "grad_share_")
    shares = [100 * statistics.mean(row[key] for row in start) for key in quartiles]
    return shares, 100 * statistics.mean(row[gradient] for row in start)


def summary(folder: Path) -> dict:
    """Return one run's accuracies (%), first-step token and gradient shares (%) and wall time."""

    def accuracy(name: str) -> float:
        return 100 * json.loads((folder / name).read_text())["overall"]["accuracy"]

    shares, grad_share_low = start_shares(folder / "metrics.jsonl")
    return {
        "greedy": (accuracy("eval_before.json"), accuracy("eval_after.json")),
        "sampled": (accuracy("eval_before_sampled.json"), accuracy("eval_after_sampled.json")),
        "shares": shares,
        "grad_share_low": grad_share_low,
        "seconds": float((folder / "wall_seconds.txt").read_text()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--config", type=Path, help="the recipe (default: the default one)")
    args = parser.parse_args()
    rows = []
    for threads in map(int, args.threads.split(",")):
        for seed in map(int, args.seeds.split(",")):
            folder = args.out / f"seed{seed}-threads{threads}"
            if not (folder / "report.md").is_file():
                train(folder, seed, threads, args.config)
            rows.append((seed, threads, summary(folder)))
    lines = [
        "| seed | threads | greedy before → after | gain | avg@4 before → after "
        "| π quartile shares, first 5 batches (%) | grad share π < 0.25 | wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, threads, r in rows:
        (g0, g1), (s0, s1) = r["greedy"], r["sampled"]
        shares = " / ".join(f"{share:.1f}" for share in r["shares"])
        lines.append(
            f"| {seed} | {threads} | {g0:.1f} → {g1:.1f}% | {g1 - g0:+.1f} | {s0:.1f} → {s1:.1f}% | {shares} | "
            f"{r['grad_share_low']:.1f}% | {r['seconds']:.0f} s |"
        )
    gains = [r["greedy"][1] - r["greedy"][0] for _, _, r in rows]
    mean_shares = [statistics.mean(r["shares"][q] for _, _, r in rows) for q in range(4)]
    lines += [
        "",
        f"greedy gain: mean {statistics.mean(gains):+.1f}, min {min(gains):+.1f}, max {max(gains):+.1f} points "
        f"over {len(gains)} runs",
        "token shares per quartile, mean: " + " / ".join(f"{m:.1f}" for m in mean_shares)
        + " (paper " + " / ".join(f"{p:.1f}" for p in PAPER_SHARES) + ")",
    ]  # fmt: skip
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
