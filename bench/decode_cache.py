"""The sampling loop's cache handling on long answers: the default's evaluation and rollout, two settings interleaved.

`lopti/cpu/decode.py` drops ended rows from the batch together, once they are 1 / LEAVE_AT of it, into a cache
preallocated for the whole answer budget; before, every row left as it ended and the evaluation (which passes its
budget as `max_new_tokens`) decoded into a DynamicCache that concatenates every layer at each step. This script
times both on a trained model of the default recipe (answers up to 300 tokens): the held-out evaluation (900
puzzles greedy, then 300 × 4 sampled at T = 1, 256 prompts per generate call) and one rollout of the RL batch
(8 prompts × 8 completions, T = 1). Each round runs the two settings in turn, alternating which goes first, and
asserts they decode the same tokens. Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/decode_cache.py --model results/testbed-runs-r6/seed0-threads2/final
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, GenerationConfig

from lopti.commands.held_out import EVAL_BATCH_SIZE
from lopti.commands.settings import default_recipe, resolve, split
from lopti.commands.train_run import task_datasets
from lopti.cpu import decode, packing
from lopti.evaluation.generation import generate
from lopti.tasks.registry import get_task


def dynamic_cache(model, capacity: int) -> DynamicCache:
    """The cache the evaluation decoded into before: concatenated at each step."""
    return DynamicCache(config=model.config)


SETTINGS = {  # name -> (cache for sampling, LEAVE_AT)
    "each row leaves as it ends, DynamicCache in the evaluation": (dynamic_cache, 1 << 30),
    "rows leave together, preallocated cache": (packing.sampling_cache, decode.LEAVE_AT),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained model folder of the default recipe")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: not a model folder (no config.json)")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    run, _ = split(resolve(default_recipe("kk"), {"output_dir": "/tmp/lopti-bench/decode-cache"}))
    train, held_out = task_datasets(get_task(run.task), run)[:2]
    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = [row["prompt"] for row in held_out]
    rollout_prompts = [train[i]["prompt"] for i in range(8) for _ in range(8)]
    budget = run.eval_max_new_tokens
    rollout_config = GenerationConfig(
        max_new_tokens=budget, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    seconds: dict[str, dict[str, list[float]]] = {name: {} for name in SETTINGS}
    for round_ in range(args.rounds):
        tokens = []
        for name in list(SETTINGS)[:: 1 if round_ % 2 == 0 else -1]:
            packing.sampling_cache, decode.LEAVE_AT = SETTINGS[name]
            parts, times = [], seconds[name]
            with packing.fast_generation(model):
                for part, call in (
                    ("greedy 900", lambda: generate(model, tokenizer, prompts, max_new_tokens=budget,
                                                    batch_size=EVAL_BATCH_SIZE)),
                    ("sampled 300 x 4", lambda: generate(model, tokenizer, prompts[:300], samples=4, temperature=1.0,
                                                         max_new_tokens=budget, batch_size=EVAL_BATCH_SIZE)),
                ):  # fmt: skip
                    started = time.perf_counter()
                    parts.append(call())
                    times.setdefault(part, []).append(time.perf_counter() - started)
                tokenizer.padding_side = "left"
                batch = tokenizer(rollout_prompts, return_tensors="pt", padding=True, add_special_tokens=False)
                torch.manual_seed(round_)
                started = time.perf_counter()
                with torch.no_grad():
                    parts.append(model.generate(**batch, generation_config=rollout_config))
                times.setdefault("rollout 8 x 8", []).append(time.perf_counter() - started)
            tokens.append(parts)
        first, second = tokens
        assert first[:2] == second[:2] and torch.equal(first[2], second[2]), "the settings decoded different tokens"
    for name, times in seconds.items():
        cells = ", ".join(f"{part} {statistics.median(values):.1f} s" for part, values in times.items())
        print(f"{name}: {cells} (median of {args.rounds})")
    old, new = (seconds[name] for name in SETTINGS)
    for part in old:
        print(f"{part}: {statistics.median(new[part]) / statistics.median(old[part]):.2f}x the time")


if __name__ == "__main__":
    main()
