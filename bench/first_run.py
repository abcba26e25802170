"""Wall time of `lopti train`'s first run (empty cache) under several sets of flags, side by side on one machine.

Each variant runs `lopti train` with no arguments but its flags, in a fresh output folder and a fresh, empty
LOPTI_CACHE (so the embedded model is converted and the evaluation before RL is computed, as on a new machine); the
variants run one after another, in turn for each round. The table gives each run's phases as its report.md states
them and each variant's median wall time against the first variant's. Torch threads: OMP_NUM_THREADS (default 2).

A variant may open with NAME=VALUE words, environment variables for its run: `PYTHONPATH=/some/checkout` runs the
lopti of another checkout (each run starts in its empty cache folder, so the working directory's lopti is not the
one imported), for the default of another version side by side with this one.

Run (the first variant with other held-out sizes, the second the default):
    OMP_NUM_THREADS=2 python bench/first_run.py --variants "--eval_puzzles 500 --eval_sampled_prompts 200;" \
        --out /tmp/first-runs
Against another version's default (a `git worktree add /tmp/lopti-before REVISION` checkout):
    OMP_NUM_THREADS=2 python bench/first_run.py --out /tmp/first-runs \
        --variants "PYTHONPATH=/tmp/lopti-before --eval_puzzles 500 --eval_sampled_prompts 200;"
"""

from __future__ import annotations

import argparse
import itertools
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


def first_run(words: list[str], out: Path) -> tuple[float, str]:
    """Run `lopti train` with a variant's flags into `out` from an empty cache, under the variant's NAME=VALUE
    environment variables; return (seconds, its report's wall-time line)."""
    settings = list(itertools.takewhile(lambda word: re.fullmatch(r"[A-Z_]+=.*", word), words))
    flags = words[len(settings) :]
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "LOPTI_CACHE": cache, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        environment |= dict(setting.split("=", 1) for setting in settings)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "lopti.cli", "train", *flags, "--output_dir", str(out.resolve())],
                              env=environment, cwd=cache, capture_output=True, text=True)  # fmt: skip
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
