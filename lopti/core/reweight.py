"""Advantage Reweighting (docs/paper.md §4): damp the advantage of low-probability tokens."""

from __future__ import annotations

import torch

from lopti.core._validate import check_finite, check_same_shape, check_unit_interval


def ar_weights(old_logprobs: torch.Tensor, alpha: float) -> torch.Tensor:
    """Return α·π_old + (1 − α) per token, detached (docs/paper.md §4).

    π_old is the rollout-time probability (from logits at the rollout temperature), so the weight is a
    constant of the RL step: it is never differentiated through. α = 0 gives all-ones (plain GRPO).
    """
    check_unit_interval("alpha", alpha)
    old_logprobs = old_logprobs.detach()
    check_finite("old_logprobs", old_logprobs)
    return alpha * old_logprobs.exp() + (1.0 - alpha)


def reweight_advantages(advantages: torch.Tensor, old_logprobs: torch.Tensor, alpha: float) -> torch.Tensor:
    """Return Â'_{i,t} = [α·π_old(o_{i,t}) + (1 − α)]·Â_{i,t}, for positive and negative Â alike."""
    check_same_shape(advantages=advantages, old_logprobs=old_logprobs)
    return ar_weights(old_logprobs, alpha) * advantages
