"""Proposition 4.2 at the logits: a token's gradient norm is set by (1 − π) (docs/paper.md §3)."""

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


def logit_grad_norm_from_sum_sq(logprobs: torch.Tensor, log_sum_sq_probs: torch.Tensor) -> torch.Tensor:
    """Return ‖∂(−log π_k)/∂z‖ = √(1 − 2π_k + Σ_j π_j²) per token (float64), from log π_k and log Σ_j π_j².

    This is the norm `logit_grad_norm` computes, for callers without the logits: TRL's fused LM head returns
    log Σ p² from the same pass over the vocabulary as the log-probs. It is evaluated as
    (1 − π)² + Σ_{j≠k} π_j², with Σ_{j≠k} π_j² = Σ p² − π² clamped to [0, (1 − π)²], where it always lies:
    float32 inputs cannot resolve it for a confident token (π → 1), and the clamp keeps such a token inside
    Proposition 4.2's bounds instead of giving a negative or NaN square.
    """
    if logprobs.shape != log_sum_sq_probs.shape:
        raise ValueError(
            f"log_sum_sq_probs{list(log_sum_sq_probs.shape)} must have the shape of logprobs{list(logprobs.shape)}"
        )
    logprobs = logprobs.detach().double()
    one_minus_pi = -torch.expm1(logprobs)  # exact near π = 1, where 1 − exp(·) cancels
    others = (log_sum_sq_probs.detach().double().exp() - (2 * logprobs).exp()).clamp(min=0.0)
    return (one_minus_pi.square() + torch.minimum(others, one_minus_pi.square())).sqrt()
