"""Proposition 4.2 at the logits: a token's gradient norm is set by (1 − π) (PAPER.md §3)."""

from __future__ import annotations

import math

import torch


def logit_grad_norm(logits: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (‖∂(−log π_k)/∂z‖, 1 − π_k) per token, from logits (..., N) and sampled ids (...).

    ∂(−log π_k)/∂z = softmax(z) − e_k, whose squared norm is (1 − π_k)² + Σ_{j≠k} π_j². Both terms are
    computed from the other tokens' probabilities, in float64, so π_k → 1 loses no precision.
    """
    if logits.shape[:-1] != token_ids.shape:
        raise ValueError(
            f"token_ids{list(token_ids.shape)} must match logits{list(logits.shape)} without the vocab axis"
        )
    probs = torch.softmax(logits.detach().double(), dim=-1)
    others = probs.scatter(-1, token_ids.long().unsqueeze(-1), 0.0)
    one_minus_pi = others.sum(dim=-1)
    norm = (one_minus_pi.square() + others.square().sum(dim=-1)).sqrt()
    return norm, one_minus_pi


def grad_norm_bounds(one_minus_pi: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the (lower, upper) bounds (1 − π)·√(N/(N − 1)) and (1 − π)·√2 on the logit-gradient norm."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be ≥ 2, got {vocab_size}")
    return one_minus_pi * math.sqrt(vocab_size / (vocab_size - 1)), one_minus_pi * math.sqrt(2.0)
