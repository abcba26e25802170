"""Held-out K&K evaluation with 🤗 generate: accuracy per number of people, pass@k, format errors."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

from lopti.tasks.kk.prompts import THINK_PREFILL
from lopti.tasks.kk.rewards import accuracy, ended_properly, strict_answer


def pass_at_k(n: int, c: int, k: int) -> float:
    """Return the unbiased pass@k estimate from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
) -> list[list[tuple[str, list[int]]]]:
    """Return, per prompt, `samples` (text, ids) completions; temperature 0 is greedy decoding."""
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    model.eval()
    flat = [p for p in prompts for _ in range(samples)]
    outputs: list[tuple[str, list[int]]] = []
    for start in range(0, len(flat), batch_size):
        batch = tokenizer(
            flat[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(model.device)
        sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else {}
        generated = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            pad_token_id=tokenizer.pad_token_id,
            **{k: v for k, v in sampling.items() if k != "do_sample"},
        )[:, batch["input_ids"].shape[1] :]
        for row in generated.tolist():
            ids = row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
            outputs.append((tokenizer.decode(ids, skip_special_tokens=True), ids))
    return [outputs[i * samples : (i + 1) * samples] for i in range(len(prompts))]


def prompt_text(prompt: str | list[dict], tokenizer) -> str:
    """Return the text to feed the model: a raw prompt as is, chat messages through the chat template."""
    if isinstance(prompt, str):
        return prompt
    continues = prompt[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=not continues, continue_final_message=continues
    )


def evaluate_kk(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Return per-size and overall metrics for K&K rows (with `prompt`, `names`, `solution`, `people`).

    accuracy = mean over samples of exact correctness (strict parse); pass@k for k = 1 and `samples`;
    format_error = share of samples with a bad tag structure or no proper end; length = mean tokens.
    """
    texts = [prompt_text(r["prompt"], tokenizer) for r in rows]
    completions = generate(model, tokenizer, texts, samples, temperature, max_new_tokens, batch_size, seed)
    per_size: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row, text_in, outs in zip(rows, texts, completions, strict=True):
        prefill = THINK_PREFILL if text_in.rstrip().endswith(THINK_PREFILL) else ""
        correct = []
        for text, ids in outs:
            ended = ended_properly(ids, tokenizer.eos_token_id, tokenizer.pad_token_id)
            correct.append(ended and accuracy(prefill + text, row["names"], row["solution"]) == 1.0)
            stats = per_size[row["people"]]
            stats["format_error"].append(float(not ended or strict_answer(prefill + text) is None))
            stats["length"].append(float(len(ids)))
        stats["accuracy"].append(sum(correct) / len(correct))
        stats[f"pass@{samples}"].append(pass_at_k(len(correct), sum(correct), samples))
    table = {
        size: {name: sum(v) / len(v) for name, v in stats.items()} | {"n": len(stats["accuracy"])}
        for size, stats in sorted(per_size.items())
    }
    everything = defaultdict(list)
    for stats in per_size.values():
        for name, values in stats.items():
            everything[name] += values
    overall = {name: sum(v) / len(v) for name, v in everything.items()} | {"n": len(rows)}
    return {"per_people": table, "overall": overall, "samples": samples, "temperature": temperature}
