"""The paper's per-token objective in one place: AR → Lopti isolation → clipped surrogate → KL, entropy.

For a micro-batch of responses sampled from π_old, with per-token advantages Â (PAPER.md §2, §4, §5):

    w_t   = α·π_old(o_t) + (1 − α)                               AR weights, detached (§4)
    A_t   = w_t·Â_t·[t ∈ P]    P = the phase's tokens (Lopti, §5), every response token otherwise
    ℓ_t   = max(−A_t·r_t, −A_t·clip(r_t, 1 − ε_low, 1 + ε_high)), r_t = π_θ/π_old,
            capped at −c·A_t where A_t < 0 (dual clip, §2)
    KL_t  = k3(π_θ ‖ π_ref)·[t ∈ P]                               each token pays its KL in one phase
    H     = Σ_t H_t·[t ∈ P] / #response tokens                  entropy bonus, the policy's denominator
    L     = Σ_t (ℓ_t + β·KL_t) / #response tokens − c_H·H        the paper's token-mean

Isolation zeroes advantages instead of dropping tokens, so every denominator counts all response tokens
in both phases, as in the authors' code. Callers aggregate ℓ and KL themselves (the trainer as TRL's
`loss_type` asks, the probe over its whole batch) and add their own plumbing (vLLM importance ratios).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lopti.core.isolation import Order, isolate_advantages, phase_masks
from lopti.core.kl import KLEstimator, kl_penalty
from lopti.core.loss import clipped_policy_loss
from lopti.core.reweight import ar_weights


@dataclass(frozen=True)
class ObjectiveTerms:
    """The per-token terms of the objective, and what callers log from it."""

    policy: torch.Tensor  # ℓ_t (B, T), zero on padding
    kl: torch.Tensor | None  # KL_t (B, T), zero outside the phase; None without reference log-probs
    entropy: torch.Tensor | None  # H, a scalar; None without entropies
    active: torch.Tensor  # bool (B, T): the phase's tokens, all response tokens without Lopti
    weights: torch.Tensor  # w_t, the AR weights
    reweighted: torch.Tensor  # w_t·Â_t before isolation: the signal each token carries over both phases
    metrics: dict[str, torch.Tensor]  # the surrogate's clip metrics (see `clipped_policy_loss`)


def token_objective(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    alpha: float = 0.0,
    phase: int | None = None,
    eta: float = 0.5,
    order: Order = "low_first",
    eps_low: float = 0.20,
    eps_high: float = 0.24,
    dual_clip: float | None = 10.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_estimator: KLEstimator = "k3",
    entropies: torch.Tensor | None = None,
) -> ObjectiveTerms:
    """Return the objective's per-token terms for (B, T) log-probs, advantages and response mask.

    `phase` is None without Lopti, else 0 or 1: the Lopti phase whose group of tokens (split by
    π_old < `eta` in `order`) gets advantages, KL and entropy. α = 0 and no phase give plain GRPO.
    """
    if phase not in (None, 0, 1):
        raise ValueError(f"phase must be None (no Lopti), 0 or 1, got {phase!r}")
    weights = ar_weights(old_logprobs, alpha)
    reweighted = advantages * weights
    valid = response_mask.bool()
    active = valid if phase is None else phase_masks(old_logprobs, response_mask, eta, order)[phase]
    isolated = reweighted if phase is None else isolate_advantages(reweighted, active)
    policy, metrics = clipped_policy_loss(logprobs, old_logprobs, isolated, response_mask, eps_low, eps_high, dual_clip)
    kl = None if ref_logprobs is None else kl_penalty(logprobs, ref_logprobs, kl_estimator, mask=active)
    entropy = None
    if entropies is not None:
        entropy = (entropies * active.to(entropies.dtype)).sum() / valid.sum().clamp(min=1)
    return ObjectiveTerms(policy, kl, entropy, active, weights, reweighted, metrics)
