"""Low-Probability Token Isolation, "Lopti" (docs/paper.md §5).

The response tokens of one RL-step batch are split once by π_old: low = π_old < η, high = the rest.
Phase 1 runs the whole actor update on one group (low by default), phase 2 reruns it from the updated
weights on the other group, against the same π_old. Phases are applied by zeroing advantages outside
the active group, so loss denominators keep counting every response token.

Two controls of the ablation keep this schedule and change only the split (`SPLITS`): `random` draws
phase 1's tokens at random, as many as π_old < η would give it (`random_phase_masks`), and `none`
updates every token in both passes (GRPO with two passes per batch).
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import torch

from lopti.core._validate import check_finite, check_mask, check_same_shape, check_unit_interval
from lopti.core.constants import LOPTI_ETA

Order = Literal["low_first", "high_first"]
ORDERS: tuple[str, ...] = ("low_first", "high_first")
Split = Literal["probability", "random", "none"]
SPLITS: tuple[str, ...] = ("probability", "random", "none")


def low_prob_mask(old_logprobs: torch.Tensor, response_mask: torch.Tensor, eta: float = LOPTI_ETA) -> torch.Tensor:
    """Return the bool mask of response tokens with π_old < η (strict)."""
    check_unit_interval("eta", eta, open_low=True, open_high=True)
    mask = check_mask("response_mask", response_mask, old_logprobs)
    check_finite("old_logprobs", old_logprobs[mask])
    # Compare in log space: exp() of a float32 log-prob can round a value just below η up to η.
    return mask & (old_logprobs.detach() < math.log(eta))


def phase_masks(
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    eta: float = LOPTI_ETA,
    order: Order = "low_first",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (phase-1 mask, phase-2 mask): a partition of the valid response tokens.

    `low_first` is the paper's method; `high_first` is its ablation (worse than GRPO, docs/paper.md §5).
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    low = low_prob_mask(old_logprobs, response_mask, eta)
    high = response_mask.bool() & ~low
    return (low, high) if order == "low_first" else (high, low)


def random_phase_masks(
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    seed: int,
    eta: float = LOPTI_ETA,
    order: Order = "low_first",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (phase-1 mask, phase-2 mask): a random partition of the valid response tokens whose phase 1
    has exactly as many tokens as `phase_masks` would give it.

    Lopti's control: the same two passes with groups of the same sizes, but tokens chosen regardless of
    π_old. What Lopti gains over it comes from ordering the update by probability, not from splitting it
    into two steps. The draw depends only on `seed` and the mask (a CPU generator), so it is the same on
    every device, in both passes over a batch and in a resumed run.
    """
    first, _ = phase_masks(old_logprobs, response_mask, eta, order)
    valid = response_mask.bool()
    positions = valid.flatten().nonzero().squeeze(1)
    generator = torch.Generator().manual_seed(seed)
    chosen = positions[torch.randperm(len(positions), generator=generator)[: int(first.sum())].to(positions.device)]
    random_first = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    random_first[chosen] = True
    random_first = random_first.view(valid.shape)
    return random_first, valid & ~random_first


def split_seed(*keys: int) -> int:
    """Return a 63-bit seed determined by `keys` (e.g. the run's seed, the RL step, the micro-batch)."""
    digest = hashlib.sha256(",".join(str(int(key)) for key in keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def quantile_eta(old_logprobs: torch.Tensor, response_mask: torch.Tensor, quantile: float) -> float:
    """Return the η that puts about a `quantile` share of the valid tokens in the low group.

    An alternative to a fixed η when the probability distribution shifts over training.
    """
    check_unit_interval("quantile", quantile, open_low=True, open_high=True)
    mask = check_mask("response_mask", response_mask, old_logprobs)
    probs = old_logprobs.detach()[mask].float().exp()
    return float(torch.quantile(probs, quantile))


def lopti_phase(micro_step: int, micro_steps_per_pass: int) -> int:
    """Return the phase (0 or 1) of a micro-step for a trainer that reuses one batch for two passes.

    Micro-steps are counted from the start of training; each generated batch is consumed by
    `micro_steps_per_pass` micro-steps in phase 0, then the same number in phase 1. Deriving the phase
    from the global counter keeps a resumed run in step.
    """
    if micro_steps_per_pass < 1:
        raise ValueError(f"micro_steps_per_pass must be ≥ 1, got {micro_steps_per_pass}")
    if micro_step < 0:
        raise ValueError(f"micro_step must be ≥ 0, got {micro_step}")
    return (micro_step // micro_steps_per_pass) % 2


def isolate_advantages(advantages: torch.Tensor, phase_mask: torch.Tensor) -> torch.Tensor:
    """Return the advantages with every token outside the phase's group set to zero."""
    check_same_shape(advantages=advantages, phase_mask=phase_mask)
    return advantages * phase_mask.to(advantages.dtype)
