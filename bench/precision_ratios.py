"""The default recipe's precision and gradient recomputation, side by side: seconds per generated batch by
component, and the held-out evaluation's decoding, in one process, with their ratios.

Variants: fp32 (what a CPU without native bf16 runs: `lopti train` chooses fp32 there), bf16 (rollout and
evaluation on bf16 weights, the update under bf16 autocast: the default where the CPU multiplies bf16 natively),
and bf16 with TRL's gradient recomputation (`gradient_checkpointing: true`, TRL's own default). Each variant trains
--batches generated batches of configs/math-smollm2-ar-cpu.yaml (the first dropped as warm-up), in alternating
order over --rounds rounds; medians are reported. The evaluation times greedy decoding of the first --prompts
held-out problems on fp32 and on bf16 weights.

Run (about 10 minutes on 2 cores):
  OMP_NUM_THREADS=2 python bench/precision_ratios.py
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch
from profile_step import COMPONENTS, one_run

from lopti.commands.settings import resolve, split
from lopti.commands.train_run import task_datasets
from lopti.cpu.packing import fast_generation
from lopti.evaluation.generation import generate, prompt_text
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import get_task

CONFIG = "configs/math-smollm2-ar-cpu.yaml"
VARIANTS = {
    "fp32": {"bf16": False, "gradient_checkpointing": False},
    "bf16": {"bf16": True, "gradient_checkpointing": False},
    "bf16 + recomputation": {"bf16": True, "gradient_checkpointing": True},
}


def decoding_seconds(prompts: int, dtype: torch.dtype) -> float:
    """Return the seconds of greedy decoding of the first `prompts` held-out problems on weights of `dtype`."""
    run, _ = split(resolve(CONFIG, {"output_dir": "/tmp/lopti-bench/precision"}))
    rows = list(task_datasets(get_task(run.task), run)[1])[:prompts]
    path = resolve_model(run.model)
    tokenizer, model = load_tokenizer(path), load_model(path)
    weights = copy.deepcopy(model).to(dtype) if dtype != torch.float32 else model
    texts = [prompt_text(row["prompt"], tokenizer) for row in rows]
    with fast_generation(weights, same_draws=False):
        started = time.perf_counter()
        generate(weights, tokenizer, texts, max_new_tokens=run.eval_max_new_tokens, batch_size=len(texts))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3, help="generated batches per run; the first is dropped")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=128, help="held-out problems decoded per precision")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
            runs[name].append(one_run(CONFIG, VARIANTS[name], args.batches, True))
    median = {name: {k: statistics.median(res[k] for res in results) for k in results[0]} for name, results in
              runs.items()}  # fmt: skip
    fp32, bf16, recompute = (median[name] for name in VARIANTS)
    print(f"| component (s per generated batch, {torch.get_num_threads()} threads) | fp32 | bf16 | bf16 + "
          "recomputation | bf16 / fp32 | recomputation / none |\n|---|---|---|---|---|---|")  # fmt: skip
    for name in (*COMPONENTS, "whole batch"):
        ratio = bf16[name] / max(fp32[name], 1e-9)
        print(
            f"| {name} | {fp32[name]:.2f} | {bf16[name]:.2f} | {recompute[name]:.2f} | {ratio:.2f} | "
            f"{recompute[name] / max(bf16[name], 1e-9):.2f} |"
        )
    decode = {dtype: decoding_seconds(args.prompts, dtype) for dtype in (torch.float32, torch.bfloat16)}
    print(
        f"\nheld-out greedy decoding of {args.prompts} problems: fp32 {decode[torch.float32]:.1f} s, bf16 "
        f"{decode[torch.bfloat16]:.1f} s, bf16 / fp32 {decode[torch.bfloat16] / decode[torch.float32]:.2f}"
    )


if __name__ == "__main__":
    main()
