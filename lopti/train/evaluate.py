"""Held-out evaluation with 🤗 generate: accuracy per group (people, level), pass@k, format errors, length."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from tqdm.auto import tqdm

from lopti.tasks.completions import ended_properly
from lopti.tasks.kk.prompts import THINK_PREFILL


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
    """Return, per prompt, `samples` (text, ids) completions; temperature 0 is greedy decoding.

    `model` is a 🤗 causal LM, or a vLLM `LLM` (see `load_vllm`), which then does the decoding.
    """
    if is_vllm(model):
        return generate_vllm(model, prompts, samples, temperature, max_new_tokens, seed)
    tokenizer.padding_side = "left"
    model.eval()
    flat = [p for p in prompts for _ in range(samples)]
    outputs: list[tuple[str, list[int]]] = []
    with torch.random.fork_rng():  # evaluating must not move the trainer's random stream
        torch.manual_seed(seed)
        for start in tqdm(range(0, len(flat), batch_size), "generating", leave=False, disable=None):
            outputs += _decode_batch(model, tokenizer, flat[start : start + batch_size], temperature, max_new_tokens)
    return [outputs[i * samples : (i + 1) * samples] for i in range(len(prompts))]


def _decode_batch(
    model, tokenizer, texts: list[str], temperature: float, max_new_tokens: int
) -> list[tuple[str, list[int]]]:
    """Return (text, ids) for each prompt of one batch, cut after the first end-of-sequence token."""
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = dict(temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else {}
    generated = model.generate(
        **batch,
        max_new_tokens=max_new_tokens,
        do_sample=temperature > 0,
        pad_token_id=tokenizer.pad_token_id,
        **sampling,
    )[:, batch["input_ids"].shape[1] :]
    outputs = []
    for row in generated.tolist():
        ids = row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
        outputs.append((tokenizer.decode(ids, skip_special_tokens=True), ids))
    return outputs


def is_vllm(model) -> bool:
    """Return True for a vLLM engine (`vllm.LLM`) rather than a 🤗 model."""
    return type(model).__module__.split(".")[0] == "vllm"


def load_vllm(model_path: str, seed: int = 0):
    """Return a vLLM engine for `model_path` when vLLM is installed and a GPU is present, else None."""
    try:
        import vllm
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return vllm.LLM(model=model_path, seed=seed)


def generate_vllm(
    llm, prompts: list[str], samples: int, temperature: float, max_new_tokens: int, seed: int
) -> list[list[tuple[str, list[int]]]]:
    """Return, per prompt, `samples` (text, ids) completions decoded by vLLM (ids end with EOS if it stopped)."""
    from vllm import SamplingParams

    params = SamplingParams(n=samples, temperature=temperature, max_tokens=max_new_tokens, seed=seed)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [[(o.text, list(o.token_ids)) for o in output.outputs] for output in outputs]


def prompt_text(prompt: str | list[dict], tokenizer) -> str:
    """Return the text to feed the model: a raw prompt as is, chat messages through the chat template."""
    if isinstance(prompt, str):
        return prompt
    continues = prompt[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=not continues, continue_final_message=continues
    )


def judge_rows(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    judge: Callable[[str, dict], tuple[bool, bool]],
    group: str,
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Return one record per row: its id, its `group` value, and per sample: correct, well formed, length.

    `judge(text, row)` says whether an answer is (correct, well formed); the text includes the prompt's
    pre-filled "<think>". A completion that did not end on its end-of-sequence token is neither.
    """
    texts = [prompt_text(r["prompt"], tokenizer) for r in rows]
    completions = generate(model, tokenizer, texts, samples, temperature, max_new_tokens, batch_size, seed)
    records = []
    for row, text_in, outs in zip(rows, texts, completions, strict=True):
        prefill = THINK_PREFILL if text_in.rstrip().endswith(THINK_PREFILL) else ""
        record = {"id": row.get("id"), "group": row[group], "correct": [], "well_formed": [], "length": []}
        for text, ids in outs:
            ended = ended_properly(ids, tokenizer.eos_token_id, tokenizer.pad_token_id)
            right, well_formed = judge(prefill + text, row) if ended else (False, False)
            record["correct"].append(right)
            record["well_formed"].append(well_formed)
            record["length"].append(len(ids))
        records.append(record)
    return records


def summarise(records: list[dict[str, Any]], group: str, samples: int, temperature: float) -> dict[str, Any]:
    """Return metrics per group value and overall from `judge_rows` records.

    accuracy = mean over samples (avg@k); pass@k for k = 1 and `samples` (unbiased); format_error = share
    of samples that are not well formed; length = mean completion tokens.
    """
    per_group: dict[Any, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        stats, correct = per_group[record["group"]], record["correct"]
        stats["accuracy"].append(sum(correct) / len(correct))
        for k in sorted({1, samples}):
            stats[f"pass@{k}"].append(pass_at_k(len(correct), sum(correct), k))
        stats["format_error"] += [float(not ok) for ok in record["well_formed"]]
        stats["length"] += [float(n) for n in record["length"]]
    table = {
        str(key): {name: sum(v) / len(v) for name, v in stats.items()} | {"n": len(stats["accuracy"])}
        for key, stats in sorted(per_group.items())
    }
    everything = defaultdict(list)
    for stats in per_group.values():
        for name, values in stats.items():
            everything[name] += values
    overall = {name: sum(v) / len(v) for name, v in everything.items()} | {"n": len(records)}
    return {"group": group, "per_group": table, "overall": overall, "samples": samples, "temperature": temperature}


def evaluate_rows(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    judge: Callable[[str, dict], tuple[bool, bool]],
    group: str,
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Return metrics per value of `group` (e.g. people, level) and overall: `summarise` of `judge_rows`."""
    records = judge_rows(model, tokenizer, rows, judge, group, samples, temperature, max_new_tokens, batch_size, seed)
    return summarise(records, group, samples, temperature)
