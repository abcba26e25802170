"""Seconds of the default recipe's rollout with generate's random numbers against draws by inverse CDF, side by side.

Samples what one generated batch of `lopti train` samples: the embedded SmolLM2-135M (on its bf16 copy where the CPU
multiplies bf16 natively, as `lopti train` does), lopti's CPU decoding, 4 training problems × 8 completions of at
most 128 tokens at T = 0.7. The two ways to draw a token (lopti/cpu/draws.py): `draw_like_multinomial` consumes the
Exp(1) numbers `torch.multinomial` draws for every vocabulary entry of every row, so the tokens are generate's for
the same seed; `draw_by_inverse_cdf` takes one uniform number per row, the same distribution. Each round decodes the
same 4 problems both ways, alternating which goes first; the report gives each way's median seconds, completion
tokens per second (the samples, hence the lengths, differ) and the ratio of the medians.
Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/rollout_draws.py --rounds 6
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
from lopti.evaluation.scoring import judge_rows
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import get_task

WAYS = {"generate's random numbers": True, "inverse CDF": False}  # name: `same_draws`


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    run, trainer_settings = split(resolve(default_recipe(), {"output_dir": "/tmp/lopti-bench/rollout-draws"}))
    task = get_task(run.task)
    problems = list(task_datasets(task, run)[0])
    path = resolve_model(run.model)
    model, tokenizer = load_model(path, attn_implementation="sdpa").eval(), load_tokenizer(path)
    weights = LowPrecisionCopy(torch.bfloat16).of(model) if native_bf16() else None
    completions, samples = trainer_settings["per_device_train_batch_size"], trainer_settings["num_generations"]
    batch = completions // samples  # problems per generated batch
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    tokens: dict[str, list[int]] = {way: [] for way in WAYS}
    for round_ in range(args.rounds):
        rows = problems[round_ * batch : (round_ + 1) * batch]
        for way in list(WAYS)[:: 1 if round_ % 2 == 0 else -1]:
            started = time.perf_counter()
            with fast_generation(model, weights, same_draws=WAYS[way]):
                records = judge_rows(
                    model, tokenizer, rows, task.judge, task.group, samples=samples,
                    temperature=trainer_settings["temperature"],
                    max_new_tokens=trainer_settings["max_completion_length"], batch_size=completions, seed=round_,
                )  # fmt: skip
            seconds[way].append(time.perf_counter() - started)
            tokens[way].append(sum(sum(record["length"]) for record in records))
    print(f"{hardware()}, {torch.get_num_threads()} threads, {'bf16' if weights is not None else 'fp32'} decoding")
    for way in WAYS:
        each = ", ".join(f"{took:.1f}" for took in seconds[way])
        rate = sum(tokens[way]) / sum(seconds[way])
        median = statistics.median(seconds[way])
        print(f"{way}: {median:.1f} s per batch ({rate:.0f} completion tokens/s; rounds {each})")
    first, second = (statistics.median(seconds[way]) for way in WAYS)
    print(f"inverse CDF / generate's random numbers: {second / first:.2f}x")


if __name__ == "__main__":
    main()
