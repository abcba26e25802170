"""The paper's per-token objective in one place: credit steps → clipped surrogate → KL, entropy.

For a micro-batch of responses sampled from π_old, with per-token advantages Â (docs/paper.md §2, §4, §5):

    w_t   = α·π_old(o_t) + (1 − α)                               AR weights, detached (§4)
    A_t   = w_t·Â_t·[t ∈ P]    P = the phase's tokens (Lopti, §5), every response token otherwise
    ℓ_t   = max(−A_t·r_t, −A_t·clip(r_t, 1 − ε_low, 1 + ε_high)), r_t = π_θ/π_old,
            capped at −c·A_t where A_t < 0 (dual clip, §2); or another per-token `surrogate` of A_t
            (TRL's CISPO and SAPO: `lopti.core.loss`)
    KL_t  = k3(π_θ ‖ π_ref)·[t ∈ P]                               each token pays its KL in one phase
    H     = Σ_t H_t·[t ∈ P] / #response tokens                  entropy bonus, the policy's denominator
    L     = Σ_t (ℓ_t + β·KL_t) / #response tokens − c_H·H        the paper's token-mean

AR and Lopti are the first two credit steps (`lopti.core.credit`); further steps (the presets of
`lopti.core.credit_presets`, or a user's own) compose with them: their weights multiply w_t, their keep
masks narrow P's policy term, their penalties add to ℓ_t, and tokens they drop leave every term and the
denominators (`ObjectiveTerms.counted`).

Isolation zeroes advantages instead of dropping tokens, so every denominator counts all response tokens
in both phases, as in the authors' code. Callers aggregate ℓ and KL themselves over `counted` (the
trainer as TRL's `loss_type` asks, the probe over its whole batch) and add their own plumbing (vLLM
importance ratios).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from lopti.core._validate import check_mask
from lopti.core.constants import DUAL_CLIP, EPS_HIGH, EPS_LOW, LOPTI_ETA
from lopti.core.credit import CreditContext, CreditStep, TokenCredit, ar_credit, combine_credit, lopti_credit
from lopti.core.isolation import Order, Split, isolate_advantages
from lopti.core.kl import KLEstimator, kl_penalty
from lopti.core.loss import clipped_policy_loss

BUILT_IN_STEPS = ("ar", "lopti")

# (log-probs, old log-probs, per-token advantages, response mask) → (per-token loss, detached metrics)
Surrogate = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]
]


@dataclass(frozen=True)
class ObjectiveTerms:
    """The per-token terms of the objective, and what callers log from it."""

    policy: torch.Tensor  # ℓ_t (B, T) plus credit penalties, zero on padding and dropped tokens
    kl: torch.Tensor | None  # KL_t (B, T), zero outside the phase; None without reference log-probs
    entropy: torch.Tensor | None  # H, a scalar; None without entropies
    active: torch.Tensor  # bool (B, T): the phase's tokens (their KL and entropy count), all without Lopti
    weights: torch.Tensor  # w_t, the product of every step's weights (AR's alone without presets)
    reweighted: torch.Tensor  # w_t·Â_t before masking: the signal each token carries over both phases
    metrics: dict[str, torch.Tensor]  # the surrogate's clip metrics (see `clipped_policy_loss`)
    counted: torch.Tensor  # bool (B, T): the tokens loss denominators count (all but dropped ones)
    kept: torch.Tensor  # bool (B, T): the tokens whose policy term carries a gradient
    credit: dict[str, TokenCredit]  # each credit step's own decision, by name


def token_objective(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    alpha: float = 0.0,
    phase: int | None = None,
    eta: float = LOPTI_ETA,
    order: Order = "low_first",
    split: Split = "probability",
    split_seed: int | None = None,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    dual_clip: float | None = DUAL_CLIP,
    ref_logprobs: torch.Tensor | None = None,
    kl_estimator: KLEstimator = "k3",
    kl_clamp: bool = True,
    entropies: torch.Tensor | None = None,
    entropy_bonus: bool = True,
    credit: Mapping[str, CreditStep] | None = None,
    surrogate: Surrogate | None = None,
) -> ObjectiveTerms:
    """Return the objective's per-token terms for (B, T) log-probs, advantages and response mask.

    `phase` is None without Lopti, else 0 or 1: the Lopti phase whose group of tokens (split by
    π_old < `eta` in `order`) gets advantages, KL and entropy; `split` `random` draws groups of the same
    sizes with `split_seed`, `none` gives every token to both phases (the controls of `lopti_credit`).
    α = 0, no phase and no `credit` give plain GRPO. `credit` maps names to further credit steps,
    applied after AR and Lopti in order. `surrogate` replaces the clipped surrogate (and so the ε and
    dual clip) with another per-token loss of the credited advantages A_t.
    `entropies` feed the steps that need them and, with `entropy_bonus`, the entropy term H. `kl_clamp`: k3 as the
    authors' code clamps it (lopti.core.kl).
    """
    if phase not in (None, 0, 1):
        raise ValueError(f"phase must be None (no Lopti), 0 or 1, got {phase!r}")
    valid = check_mask("response_mask", response_mask, logprobs)
    clashing = sorted(set(credit or {}) & set(BUILT_IN_STEPS))
    if clashing:
        raise ValueError(f"credit step name(s) {clashing} are taken by the built-in AR and Lopti steps")
    steps = {"ar": ar_credit(alpha), "lopti": lopti_credit(eta, order, split, split_seed), **(credit or {})}
    context = CreditContext(logprobs, old_logprobs, advantages, valid, entropies, phase, eps_low, eps_high)
    combined, decisions = combine_credit(context, steps)
    weights = combined.weights  # the AR step always gives weights (all ones for α = 0)
    reweighted = advantages * weights
    active = valid if combined.regularised is None else valid & combined.regularised
    counted = valid if combined.drop is None else valid & ~combined.drop
    kept = counted if combined.keep is None else counted & combined.keep
    isolated = reweighted if combined.keep is None else isolate_advantages(reweighted, combined.keep)
    if surrogate is None:
        policy, metrics = clipped_policy_loss(
            logprobs, old_logprobs, isolated, response_mask, eps_low, eps_high, dual_clip
        )
    else:
        policy, metrics = surrogate(logprobs, old_logprobs, isolated, response_mask)
    if combined.penalty is not None:
        policy = policy + combined.penalty * kept.to(policy.dtype)
    if combined.drop is not None:
        policy = policy * counted.to(policy.dtype)
        active = active & counted
    kl = None if ref_logprobs is None else kl_penalty(logprobs, ref_logprobs, kl_estimator, active, kl_clamp)
    entropy = None
    if entropies is not None and entropy_bonus:
        entropy = (entropies * active.to(entropies.dtype)).sum() / counted.sum().clamp(min=1)
    return ObjectiveTerms(policy, kl, entropy, active, weights, reweighted, metrics, counted, kept, decisions)


def credit_shares(credit: Mapping[str, TokenCredit], valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """Return, per credit step beyond AR and Lopti, the per-token values whose mean over `valid` is a share
    logged as `credit/<key>`: `<step>_kept_share` (steps with keep or drop), `<step>_weight_mean` (steps
    with weights), `<step>_selected_share` (steps that single tokens out). One definition for the trainer's
    logs and the probe's (`lopti analyze`), so that the two report the same quantity."""
    values = {}
    for name, decision in credit.items():
        if name in BUILT_IN_STEPS:
            continue
        if decision.keep is not None or decision.drop is not None:
            kept = valid if decision.keep is None else valid & decision.keep
            kept = kept if decision.drop is None else kept & ~decision.drop
            values[f"{name}_kept_share"] = kept.float()
        if decision.weights is not None:
            values[f"{name}_weight_mean"] = decision.weights
        if decision.selected is not None:
            values[f"{name}_selected_share"] = decision.selected.float()
    return values
