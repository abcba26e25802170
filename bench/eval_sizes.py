"""Seconds of the default recipe's held-out evaluation at several set sizes, side by side in one process.

Decodes what `lopti train`'s evaluation before RL decodes: the embedded SmolLM2-135M (on its bf16 copy where the CPU
multiplies bf16 natively, as `lopti train` does), lopti's CPU decoding, greedy on the first G held-out problems and 2
samples at T = 0.7 on the first S. Each round runs every size once, in turn, so that a drift in the machine's speed
falls on each alike; the report gives each size's median seconds and its ratio to the first size.
Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/eval_sizes.py --sizes 500/200,150/150,100/100 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from lopti.commands.settings import default_recipe, resolve, split
from lopti.commands.train_run import task_datasets
from lopti.cpu.packing import fast_generation
from lopti.cpu.precision import LowPrecisionCopy, hardware, native_bf16
from lopti.evaluation.scoring import evaluate_rows
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import get_task


def evaluate(model, weights, tokenizer, task, rows, run, greedy: int, sampled: int) -> float:
    """Return the seconds of one evaluation: greedy on the first `greedy` rows, 2 samples on the first `sampled`."""
    common = dict(judge=task.judge, group=task.group, max_new_tokens=run.eval_max_new_tokens, batch_size=512)
    started = time.perf_counter()
    with fast_generation(model, weights, same_draws=False):
        evaluate_rows(model, tokenizer, rows[:greedy], **common)
        evaluate_rows(model, tokenizer, rows[:sampled], samples=2, temperature=0.7, **common)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500/200,150/150,100/100", help="greedy/sampled problems, comma-separated")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    sizes = [tuple(map(int, size.split("/"))) for size in args.sizes.split(",")]
    run, _ = split(resolve(default_recipe(), {"output_dir": "/tmp/lopti-bench/eval-sizes"}))
    task = get_task(run.task)
    rows = list(task_datasets(task, run)[1])
    path = resolve_model(run.model)
    model, tokenizer = load_model(path, attn_implementation="sdpa").eval(), load_tokenizer(path)
    weights = LowPrecisionCopy(torch.bfloat16).of(model) if native_bf16() else None
    seconds: dict[tuple[int, int], list[float]] = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            seconds[size].append(evaluate(model, weights, tokenizer, task, rows, run, *size))
    print(f"{hardware()}, {torch.get_num_threads()} threads, {'bf16' if weights is not None else 'fp32'} decoding")
    base = statistics.median(seconds[sizes[0]])
    for size in sizes:
        median = statistics.median(seconds[size])
        each = ", ".join(f"{took:.1f}" for took in seconds[size])
        print(f"greedy {size[0]} / sampled 2 x {size[1]}: {median:.1f} s ({median / base:.2f}x; rounds {each})")


if __name__ == "__main__":
    main()
