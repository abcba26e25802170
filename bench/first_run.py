"""Wall time of `lopti train`'s first run (empty cache) under several sets of flags, side by side on one machine.

Each variant runs `lopti train` with no arguments but its flags, in a fresh output folder and a fresh, empty
LOPTI_CACHE (so the embedded model is converted and the evaluation before RL is computed, as on a new machine); the
variants run one after another, in turn for each round. The table gives each run's phases as its report.md states
them and each variant's median wall time against the first variant's. Torch threads: OMP_NUM_THREADS (default 2).

Run (the first variant with other held-out sizes, the second the default):
    OMP_NUM_THREADS=2 python bench/first_run.py --variants "--eval_puzzles 500 --eval_sampled_prompts 200;" \
        --out /tmp/first-runs
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lopti.cpu.precision import hardware


def first_run(flags: list[str], out: Path) -> tuple[float, str]:
    """Run `lopti train` with `flags` into `out` from an empty cache; return (seconds, its report's wall-time line)."""
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "LOPTI_CACHE": cache, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "lopti.cli", "train", *flags, "--output_dir", str(out)],
                              env=environment, capture_output=True, text=True)  # fmt: skip
        seconds = time.perf_counter() - started
    (out / "console.txt").write_text(done.stdout + done.stderr)  # what the run printed, warnings included
    if done.returncode != 0:
        raise SystemExit(f"lopti train {' '.join(flags)} failed:\n{done.stderr[-3000:]}")
    return seconds, re.search(r"Wall time: .*", (out / "report.md").read_text()).group(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", required=True, help="each variant's flags, separated by ';' (empty: none)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", required=True, help="a folder for the runs")
    args = parser.parse_args()
    variants = [shlex.split(flags) for flags in args.variants.split(";")]
    seconds: dict[int, list[float]] = {index: [] for index in range(len(variants))}
    print(hardware())
    for round_ in range(args.rounds):
        for index, flags in enumerate(variants):
            took, wall = first_run(flags, Path(args.out) / f"variant{index}-round{round_}")
            seconds[index].append(took)
            print(f"variant {index} ({' '.join(flags) or 'the default'}), round {round_}: {took:.0f} s; {wall}")
    base = statistics.median(seconds[0])
    for index, flags in enumerate(variants):
        median = statistics.median(seconds[index])
        print(f"variant {index} ({' '.join(flags) or 'the default'}): {median:.0f} s, {median / base:.2f}x")


if __name__ == "__main__":
    main()
