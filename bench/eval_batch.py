"""Seconds of the default's greedy held-out evaluation against the prompts decoded per generate call.

Loads a trained model (a run's `final/` folder), then decodes the default recipe's held-out puzzles greedily
with lopti's CPU decoding (`fast_generation`) at each batch size in turn, printing the seconds and the accuracy
(the same at every size). Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/eval_batch.py --model results/testbed-runs-r5/seed0-threads2/final
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lopti.commands.settings import default_recipe, resolve, split
from lopti.commands.train_run import task_datasets
from lopti.cpu.packing import fast_generation
from lopti.evaluation.scoring import evaluate_rows
from lopti.tasks.registry import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained model folder")
    parser.add_argument("--batch_sizes", default="64,128,256,512,900")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    run, _ = split(resolve(default_recipe("kk"), {"output_dir": "/tmp/lopti-bench/eval-batch"}))
    task = get_task(run.task)
    rows = list(task_datasets(task, run)[1])
    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    for batch_size in map(int, args.batch_sizes.split(",")):
        with fast_generation(model):
            started = time.perf_counter()
            result = evaluate_rows(model, tokenizer, rows, task.judge, task.group,
                                   max_new_tokens=run.eval_max_new_tokens, batch_size=batch_size)  # fmt: skip
            seconds = time.perf_counter() - started
        print(f"batch {batch_size}: {seconds:.1f} s, greedy accuracy {100 * result['overall']['accuracy']:.1f}%")


if __name__ == "__main__":
    main()
