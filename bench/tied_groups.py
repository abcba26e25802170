"""Seconds of the packed update forward and backward with the rows of tied groups run without autograd against with
autograd on every row, side by side.

A group whose completions all earn the same reward has all-zero advantages, so lopti's loss (β = 0, no entropy term
or credit step, as in the default recipe) gives its rows no gradient; about half the default's groups tie (its
`frac_reward_zero_std`). `lopti.cpu.packing.packed_log_probs` then runs those prompts' forward without autograd, and the
backward leaves them out. The batch has the default recipe's shapes (bench/packed_head.py: 4 prompts of 150 tokens ×
8 completions of 30-60 tokens) on the embedded SmolLM2-135M under bf16 autocast where the CPU has native bf16, with
1, 2 and 3 of its 4 groups tied; the loss weighs each row by a zero advantage in a tied group, by ±1 elsewhere. Each
round runs both ways, alternating which goes first; the report gives each way's median seconds (the first round left
out) and their ratio, and checks that both give the same gradient. Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/tied_groups.py --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from packed_head import BUDGET, GROUP, PROMPTS, default_shaped_setup  # bench/ is the script's folder: on sys.path

from lopti.cpu import packing
from lopti.cpu.precision import hardware, native_bf16


def update(model, ids, mask, advantages: torch.Tensor, freeze: bool) -> tuple[float, torch.Tensor]:
    """Return (seconds, flat gradient) of one packed forward and backward of Σ advantage · log π."""
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16()):
        frozen = advantages == 0 if freeze else None
        log_probs, _, _ = packing.packed_log_probs(model, ids, mask, BUDGET, 0, len(ids), 0.7, frozen)
    (log_probs * advantages[:, None]).sum().backward()
    took = time.perf_counter() - started
    gradient = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return took, gradient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    model, ids, mask = default_shaped_setup()
    print(f"{hardware()}, {torch.get_num_threads()} threads, {'bf16 autocast' if native_bf16() else 'fp32'}")
    for tied in range(1, PROMPTS):
        signs = torch.tensor([1.0, -1.0]).repeat(PROMPTS * GROUP // 2)
        advantages = signs * (torch.arange(PROMPTS * GROUP) // GROUP >= tied)  # the first `tied` groups tie
        ways = {"autograd on every row": False, "tied groups without autograd": True}
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        gradients = {}
        for round_ in range(args.rounds):
            for way in list(ways)[:: 1 if round_ % 2 == 0 else -1]:
                took, gradients[way] = update(model, ids, mask, advantages, ways[way])
                seconds[way].append(took)
        every, frozen = gradients.values()
        assert (frozen - every).norm() <= 1e-3 * every.norm(), "the two ways give different gradients"
        medians = [statistics.median(seconds[way][1:]) for way in ways]
        rounds = "; ".join(f"{way}: " + ", ".join(f"{took:.2f}" for took in seconds[way]) for way in ways)
        print(f"{tied} of {PROMPTS} groups tied: {medians[0]:.2f} s -> {medians[1]:.2f} s, "
              f"{medians[1] / medians[0]:.2f}x (rounds {rounds})")  # fmt: skip


if __name__ == "__main__":
    main()
