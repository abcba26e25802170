"""Seconds of the default recipe's generated batch with the rollout drawn by inverse CDF against with generate's
random numbers, side by side.

Trains the default recipe (`lopti train` with no arguments, as bench/profile_step.py builds it: evaluation off) for
`--batches` generated batches each way, the ways alternating over `--rounds`. The two ways to draw a token
(lopti/cpu/draws.py): `draw_like_multinomial` consumes the Exp(1) numbers `torch.multinomial` draws for every
vocabulary entry of every row, so the tokens are generate's for the seed (`CpuFastPath.draws_like_generate = True`);
`draw_by_inverse_cdf` takes one uniform number per row, the same distribution (the default). The report gives each
way's median seconds per generated batch of generation and of the whole batch (each run's first batch left out) and
the ratios. The rollouts differ between the ways, and so do their lengths. Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/rollout_draws.py --rounds 2 --batches 4
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from profile_step import one_run

from lopti.commands.settings import default_recipe
from lopti.cpu.fast_path import CpuFastPath
from lopti.cpu.precision import hardware

WAYS = {"generate's random numbers": True, "inverse CDF": False}  # name: `draws_like_generate`
SHOWN = ("generation", "whole batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=4, help="generated batches per run; the first is dropped")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    seconds: dict[str, dict[str, list[float]]] = {way: {part: [] for part in SHOWN} for way in WAYS}
    for round_ in range(args.rounds):
        for way in list(WAYS)[:: 1 if round_ % 2 == 0 else -1]:
            CpuFastPath.draws_like_generate = WAYS[way]
            medians = one_run(str(default_recipe()), {}, args.batches, cpu_fast_path=True)
            for part in SHOWN:
                seconds[way][part].append(medians[part])
    print(f"{hardware()}, {torch.get_num_threads()} threads")
    for way in WAYS:
        cells = "; ".join(
            f"{part} {statistics.median(values):.2f} s (rounds {', '.join(f'{v:.2f}' for v in values)})"
            for part, values in seconds[way].items()
        )
        print(f"{way}: {cells}")
    for part in SHOWN:
        before, after = (statistics.median(seconds[way][part]) for way in WAYS)
        print(f"{part}, inverse CDF / generate's random numbers: {after / before:.2f}x")


if __name__ == "__main__":
    main()
