"""Seconds of `lopti eval` on the default recipe's held-out set: 🤗 generate against lopti's CPU decoding.

Each variant is one `lopti eval` (`run_eval`) of the embedded SmolLM2-135M on the first N held-out problems of
`configs/math-smollm2-ar-cpu.yaml`, greedy, with the recipe's answer budget, into a fresh folder: `backend` hf (🤗
generate on the fp32 weights) or auto (lopti train's held-out decoding on the CPU), `bf16` for auto's weights, and
the prompts per generate call. Each round runs every variant once, in turn; the report gives each variant's median
seconds, its ratio to the first variant's, and its accuracy. Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/eval_decoding.py --variants hf:false:64,auto:false:64,auto:true:64,auto:true:512
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lopti.commands.eval_run import EvalConfig, run_eval
from lopti.commands.settings import default_recipe, from_run_config
from lopti.cpu import hardware


def one_eval(base: EvalConfig, variant: str, folder: Path) -> tuple[float, float]:
    """Return (seconds, greedy accuracy) of one evaluation of `base` decoded as `variant` says."""
    backend, bf16, batch_size = variant.split(":")
    config = EvalConfig(**{**vars(base), "backend": backend, "bf16": bf16 == "true", "batch_size": int(batch_size)})
    started = time.perf_counter()
    result = run_eval(config, folder)
    return time.perf_counter() - started, result["overall"]["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="hf:false:64,auto:false:64,auto:true:64,auto:true:512",
                        help="backend:bf16:batch_size, comma-separated; the first is the reference")  # fmt: skip
    parser.add_argument("--problems", type=int, default=100, help="held-out problems (the recipe's first N)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    recipe = from_run_config(default_recipe(), EvalConfig)
    base = EvalConfig(**{**recipe, "eval_puzzles": args.problems, "samples": 1, "temperature": 0.0})
    variants = args.variants.split(",")
    seconds: dict[str, list[float]] = {variant: [] for variant in variants}
    accuracy: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for index, variant in enumerate(variants):
                took, accuracy[variant] = one_eval(base, variant, Path(scratch) / f"{round_}-{index}")
                seconds[variant].append(took)
    print(f"{hardware()}, {torch.get_num_threads()} threads, {args.problems} problems greedy, budget "
          f"{base.eval_max_new_tokens} tokens")  # fmt: skip
    reference = statistics.median(seconds[variants[0]])
    for variant in variants:
        median = statistics.median(seconds[variant])
        rounds = ", ".join(f"{took:.1f}" for took in seconds[variant])
        print(f"{variant}: {median:.1f} s ({median / reference:.2f}x; rounds {rounds}), accuracy "
              f"{100 * accuracy[variant]:.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
