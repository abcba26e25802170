"""Where the time of one rollout of the default batch goes: TRL's `generate` against the CPU fast path's.

The default batch: 8 K&K prompts (the tiny model's terse template) × 8 generations = 64 completions of at most 48
tokens, temperature 1.0, TRL's generation settings; the cached tiny model (`resolve_model("tiny")`), one torch
thread unless OMP_NUM_THREADS says otherwise. Each round runs both paths on the same seed (the same tokens),
alternating their order; prints seconds and completion tokens/s per path (min / median / max over rounds) and a
cProfile breakdown of one more rollout per path: the model's matmuls (`linear`), attention (`sdpa`, and in the
fast path's decode steps `decode.single_query_attention` with everything it calls), cache concatenation (`cat`),
cache row selection, sampling (softmax, multinomial or its Exp(1) noise, argmax), and the rest of the per-step
work (module calls, norms, rotary, masks, generate's bookkeeping).

Run: python bench/profile_rollout.py --rounds 5
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from lopti.commands.settings import RunConfig
from lopti.cpu.packing import shared_prefill_generate
from lopti.models.loading import load_tokenizer, resolve_model
from lopti.tasks.registry import get_task

PROMPTS, GROUP, MAX_NEW_TOKENS = 8, 8, 48
ATTENTION = "attention over the cache (sdpa; the decode steps' matmuls)"
ATTENTION_CODE = ("single_query_attention", "by_group", "by_row")  # the fast path's decode attention, in decode.py
CATEGORIES = {  # cProfile function name -> category (by own time)
    "linear": "matmuls (linear)",
    "scaled_dot_product_attention": ATTENTION,
    "cat": "cache concatenation (cat)",
    "batch_select_indices": "cache row selection",
    "softmax": "sampling",
    "multinomial": "sampling",
    "exponential_": "sampling",
    "argmax": "sampling",
}
# generate's per-step helpers (inputs, cache bookkeeping, the 2D -> 4D mask), reported by cumulative time
PER_STEP_MACHINERY = ("prepare_inputs_for_generation", "_update_model_kwargs_for_generation", "create_causal_mask")


def default_batch(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Return TRL's left-padded (ids, mask) of the default batch."""
    run = RunConfig(task="kk", people="3", template="terse", fixed_names=True, train_puzzles=64, eval_puzzles=1)
    rows, _ = get_task("kk").rows(run)
    prompts = [tokenizer(row["prompt"])["input_ids"] for row in rows[:PROMPTS] for _ in range(GROUP)]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def rollout(generate, model, ids, mask, config, seed: int) -> tuple[float, int, torch.Tensor]:
    """Return (seconds, completion tokens up to each end, sequences) of one seeded rollout."""
    torch.manual_seed(seed)
    with torch.no_grad():
        started = time.perf_counter()
        sequences = generate(model, input_ids=ids, attention_mask=mask, generation_config=config)
        seconds = time.perf_counter() - started
    is_end = torch.isin(sequences[:, ids.size(1) :], torch.tensor(config.eos_token_id))
    tokens = torch.where(is_end.any(dim=1), is_end.int().argmax(dim=1) + 1, is_end.size(1))
    return seconds, int(tokens.sum()), sequences


def breakdown(generate, model, ids, mask, config) -> dict[str, float]:
    """Return seconds per category of one profiled rollout."""
    profiler = cProfile.Profile()
    profiler.enable()
    rollout(generate, model, ids, mask, config, seed=0)
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    parts = {"whole rollout": sum(own for (_, _, _), (_, _, own, _, _) in stats.items())}
    for (_, _, name), (_, _, own, _, callers) in stats.items():
        # the decode attention's own time, and what the functions it calls spent on its calls (matmul, softmax...)
        in_attention = (
            own
            if name in ATTENTION_CODE
            else sum(entry[2] for (_, _, caller), entry in callers.items() if caller in ATTENTION_CODE)
        )
        match = re.match(r"<(?:built-in )?method '?([\w.]+)", name)
        label = CATEGORIES.get((match.group(1) if match else name).split(".")[-1])
        if in_attention:
            parts[ATTENTION] = parts.get(ATTENTION, 0.0) + in_attention
        if label and own > in_attention:
            parts[label] = parts.get(label, 0.0) + own - in_attention
    parts["rest (module calls, norms, rotary, masks, bookkeeping)"] = parts["whole rollout"] - sum(
        value for key, value in parts.items() if key != "whole rollout"
    )
    for (_, _, name), (_, _, _, cumulative, _) in stats.items():
        if name in PER_STEP_MACHINERY:
            parts[f"  of which generate's {name} (cumulative)"] = cumulative
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = resolve_model("tiny")
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids, mask = default_batch(tokenizer)
    config = GenerationConfig(  # TRL's (GRPOTrainer.__init__) at the default settings
        max_new_tokens=MAX_NEW_TOKENS, do_sample=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id], temperature=1.0, top_p=1.0, top_k=0, disable_compile=True,
    )  # fmt: skip
    paths = {"TRL's generate": type(model).generate, "fast path": shared_prefill_generate}
    rollout(type(model).generate, model, ids, mask, config, seed=0)  # warm-up
    results = {name: [] for name in paths}
    for r in range(args.rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        outputs = {}
        for name in order:
            seconds, tokens, outputs[name] = rollout(paths[name], model, ids, mask, config, seed=r)
            results[name].append((seconds, tokens))
        assert torch.equal(*outputs.values()), "the two paths sampled different tokens"
    for name, runs in results.items():
        seconds = [s for s, _ in runs]
        rates = [n / s for s, n in runs]
        print(f"{name}: {min(seconds):.3f} / {statistics.median(seconds):.3f} / {max(seconds):.3f} s, "
              f"{min(rates):.0f} / {statistics.median(rates):.0f} / {max(rates):.0f} tokens/s")  # fmt: skip
    ratios = [b[0] / a[0] for a, b in zip(results["fast path"], results["TRL's generate"], strict=True)]
    print(f"tokens/s ratio fast / TRL: {min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}")
    for name, generate in paths.items():
        print(f"\n{name} (one profiled rollout, seed 0):")
        for label, seconds in breakdown(generate, model, ids, mask, config).items():
            print(f"  {label}: {seconds:.3f} s")


if __name__ == "__main__":
    main()
