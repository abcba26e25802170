"""Seconds of the packed update forward and backward with the LM head from the first completion column against over
every column, side by side.

`lopti.cpu.packing.packed_log_probs` runs the model on each prompt once, followed by its completions, and reads the
log-probs at the completion positions; the LM head (SmolLM2's 49,152 × 576 projection) needs only the columns from the
first one holding a completion token. The batch has the default recipe's shapes: 4 prompts of 150 tokens × 8
completions of 30-60 tokens within a budget of 128, on the embedded SmolLM2-135M under bf16 autocast (as `lopti train`
updates on a CPU with native bf16; fp32 elsewhere). Each round runs both ways, alternating which goes first; the
report gives each way's median seconds (the first round left out) and their ratio, and checks the log-probs agree.
Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/packed_head.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from lopti.cpu import packing
from lopti.cpu.precision import hardware, native_bf16
from lopti.models.loading import load_model, resolve_model

PROMPTS, PROMPT_TOKENS, GROUP, BUDGET, SHORTEST, LONGEST = 4, 150, 8, 128, 30, 60


def default_shaped_batch(vocabulary: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (ids, mask) in TRL's layout: each prompt GROUP times, then right-padded completions."""
    generator = torch.Generator().manual_seed(0)
    ids, mask = [], []
    for _ in range(PROMPTS):
        prompt = torch.randint(10, vocabulary, (PROMPT_TOKENS,), generator=generator)
        for _ in range(GROUP):
            length = int(torch.randint(SHORTEST, LONGEST + 1, (1,), generator=generator))
            completion = torch.zeros(BUDGET, dtype=torch.long)
            completion[:length] = torch.randint(10, vocabulary, (length,), generator=generator)
            ids.append(torch.cat([prompt, completion]))
            mask.append(torch.cat([torch.ones(PROMPT_TOKENS, dtype=torch.long), (completion > 0).long()]))
    return torch.stack(ids), torch.stack(mask)


def default_shaped_setup() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """Set torch's threads from OMP_NUM_THREADS (default 2); return the embedded SmolLM2-135M in training mode and a
    batch of the default recipe's shapes (`default_shaped_batch`), as the update benchmarks time it."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    model = load_model(resolve_model("smollm2-135m"), attn_implementation="sdpa").train()
    return model, *default_shaped_batch(model.config.vocab_size)


def every_column(forward):
    """`forward` with the LM head over every column: the logits it returns are cut to what was asked for after."""

    def run(*args, logits_to_keep: int = 0, **kwargs):
        output = forward(*args, **kwargs)
        output.logits = output.logits[:, -logits_to_keep:]
        return output

    return run


def update(model, ids, mask, head_on_every_column: bool) -> tuple[float, torch.Tensor]:
    """Return (seconds, log-probs) of one packed forward and backward."""
    own = model.forward
    if head_on_every_column:
        model.forward = every_column(own)
    try:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16()):
            log_probs, entropy, _ = packing.packed_log_probs(model, ids, mask, BUDGET, 0, len(ids), temperature=0.7)
        (log_probs.sum() + entropy.sum()).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - started, log_probs.detach()
    finally:
        model.forward = own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model, ids, mask = default_shaped_setup()
    ways = {"over every column": True, "from the first completion column": False}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    log_probs = {}
    for round_ in range(args.rounds):
        for way in list(ways)[:: 1 if round_ % 2 == 0 else -1]:
            took, log_probs[way] = update(model, ids, mask, ways[way])
            seconds[way].append(took)
    torch.testing.assert_close(*log_probs.values(), rtol=0, atol=1e-5)
    print(f"{hardware()}, {torch.get_num_threads()} threads, {'bf16 autocast' if native_bf16() else 'fp32'}")
    for way in ways:
        each = ", ".join(f"{took:.2f}" for took in seconds[way])
        print(f"LM head {way}: {statistics.median(seconds[way][1:]):.2f} s (rounds {each})")
    before, after = (statistics.median(seconds[way][1:]) for way in ways)
    print(f"from the first completion column / over every column: {after / before:.2f}x")


if __name__ == "__main__":
    main()
