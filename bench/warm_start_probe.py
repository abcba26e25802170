"""What a warm start's samples hold: how often it opens a trace, and how often each way of answering is right.

On the first --puzzles puzzles of a validation split (the validation.json that bench/testbed_select.py writes),
prints the mean probability of the first completion token opening the trace ("\\n") and the share of prompts
whose greedy choice it is; then accuracy when the completion is started with the trace or with "</think>"
(answering at once), greedy and at T = 1 (--samples per prompt).

Run (about a minute on one core):
  OMP_NUM_THREADS=1 python bench/warm_start_probe.py --validation results/testbed-select-2/validation.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lopti.cpu.packing import fast_generation
from lopti.models.embedded import SHIPPED
from lopti.tasks.kk.rewards import accuracy


def started_accuracy(model, tokenizer, rows: list[dict], start: str, temperature: float, samples: int) -> float:
    """Return the mean accuracy of completions that begin with `start` after each prompt."""
    prompts = [row["prompt"] + start for row in rows for _ in range(samples)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    sampling = dict(do_sample=True, temperature=temperature, top_k=0) if temperature > 0 else dict(do_sample=False)
    torch.manual_seed(0)
    with torch.no_grad(), fast_generation(model):
        out = model.generate(**batch, max_new_tokens=300, pad_token_id=tokenizer.pad_token_id, **sampling)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    repeated = [row for row in rows for _ in range(samples)]
    pairs = zip(texts, repeated, strict=True)
    return statistics.mean(accuracy("<think>" + start + text, r["names"], r["solution"]) for text, r in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--validation", type=Path, required=True)
    parser.add_argument("--model", default=str(SHIPPED / "tiny"))
    parser.add_argument("--puzzles", type=int, default=100)
    parser.add_argument("--samples", type=int, default=2)
    args = parser.parse_args()
    rows = json.loads(args.validation.read_text())[: args.puzzles]
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    trace, answer = tokenizer("\n")["input_ids"][0], tokenizer.convert_tokens_to_ids("</think>")
    batch = tokenizer([row["prompt"] for row in rows], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        first = model(**batch).logits[:, -1].softmax(-1)
    print(f"P(first token opens the trace): mean {first[:, trace].mean().item():.3f}, "
          f"greedy choice on {(first[:, trace] > first[:, answer]).float().mean().item():.0%} of prompts")  # fmt: skip
    for name, start in (("trace", "\n"), ("at once", "</think>")):
        greedy = started_accuracy(model, tokenizer, rows, start, 0.0, 1)
        sampled = started_accuracy(model, tokenizer, rows, start, 1.0, args.samples)
        print(f"started {name}: greedy {greedy:.1%}, T=1 {sampled:.1%}")


if __name__ == "__main__":
    main()
