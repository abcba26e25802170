"""One torch thread against two on the CPU fast path: the packed update and the shared-prefill rollout.

A default-shaped batch (8 prompts of 50–76 tokens × 8 completions of 25–40 tokens) on the cached warm-started
tiny model: forward + backward of `packed_log_probs`, and a 48-token sampled rollout through
`shared_prefill_generate`, thread counts alternating in one process. Run it with the other core idle.

Run: python bench/threads.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from trl.trainer.utils import add_fused_lm_head

from lopti.cpu.packing import packed_log_probs, shared_prefill_generate
from lopti.models.loading import resolve_model


def default_batch(vocab: int, completion_length: int = 40) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Return (ids, mask, prompt width) in TRL's layout: 8 prompts × 8 completions, left/right padded."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(50, 77, (8,), generator=generator).tolist()
    width = max(lengths)
    ids = torch.zeros(64, width + completion_length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for group, length in enumerate(lengths):
        prompt = torch.randint(3, vocab, (length,), generator=generator)
        for row in range(group * 8, group * 8 + 8):
            n = int(torch.randint(25, completion_length + 1, (1,), generator=generator))
            ids[row, width - length : width], mask[row, width - length : width + n] = prompt, 1
            ids[row, width : width + n] = torch.randint(3, vocab, (n,), generator=generator)
    return ids, mask, width


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"))
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "log_sum_sq_probs"))
    ids, mask, width = default_batch(model.config.vocab_size)
    config = GenerationConfig(max_new_tokens=48, do_sample=True, temperature=1.0, top_k=0, pad_token_id=0)
    seconds: dict[tuple[str, int], list[float]] = {(part, n): [] for part in ("update", "rollout") for n in (1, 2)}
    for _ in range(args.repeats):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            started = time.perf_counter()
            model.zero_grad()
            packed_log_probs(model, ids, mask, ids.size(1) - width, 0, len(ids))[0].sum().backward()
            seconds["update", threads].append(time.perf_counter() - started)
            started = time.perf_counter()
            with torch.no_grad():
                shared_prefill_generate(model, ids[:, :width], mask[:, :width], generation_config=config)
            seconds["rollout", threads].append(time.perf_counter() - started)
    for part in ("update", "rollout"):
        one, two = (statistics.median(seconds[part, n]) for n in (1, 2))
        print(f"{part}: 1 thread {one:.3f} s, 2 threads {two:.3f} s, speed-up {one / two:.2f}x")


if __name__ == "__main__":
    main()
