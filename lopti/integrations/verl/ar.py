"""Advantage Reweighting as a verl policy loss, `lopti_ar` (docs/paper.md §4; docs/guides/verl.md).

Switched on by three overrides of `actor_rollout_ref.actor.policy_loss`: `_target_` names
`ARPolicyLossConfig` (verl builds the actor config with Hydra's `instantiate`, so the subclass carries
α through verl's own config path), `loss_mode=lopti_ar` and `ar_alpha`. The surrogate is lopti.core's
(same arithmetic as the TRL integration); its reduction is verl's `agg_loss` with verl's global token
counts, so data-parallel and micro-batch normalisation stay exactly verl's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss
from verl.workers.config import ActorConfig, PolicyLossConfig

from lopti.core import ar_weights, clipped_policy_loss

LOSS_MODE = "lopti_ar"
POLICY_LOSS_KEY = "actor_rollout_ref.actor.policy_loss"
CLIP_RATIO_C_KEY = "actor_rollout_ref.actor.clip_ratio_c"


@dataclass
class ARPolicyLossConfig(PolicyLossConfig):
    """verl's `PolicyLossConfig` plus AR's α; every verl field keeps its meaning.

    ar_alpha (float): α in [0, 1]; each token's advantage is scaled by α·π_old + (1 − α). 0 gives verl's
        vanilla loss exactly. The paper's value depends on the task: each lopti task's `ar_alpha`.
    """

    loss_mode: str = LOSS_MODE
    ar_alpha: float = 0.0

    def __post_init__(self) -> None:
        # Any other loss mode would ignore α without a word: AR needs the token-level dual-clip surrogate.
        if self.loss_mode != LOSS_MODE:
            raise ValueError(
                f"{POLICY_LOSS_KEY}.loss_mode={self.loss_mode!r} cannot apply {POLICY_LOSS_KEY}.ar_alpha: "
                f"AR reweights the token-level dual-clip surrogate, set {POLICY_LOSS_KEY}.loss_mode={LOSS_MODE}"
            )
        if not 0.0 <= self.ar_alpha <= 1.0:
            raise ValueError(f"{POLICY_LOSS_KEY}.ar_alpha must be in [0, 1], got {self.ar_alpha}")


def ar_alpha_of(config: ActorConfig | Any) -> float:
    """Return α from the actor config (a dataclass, or the driver's DictConfig), or say which override is missing."""
    alpha = config.policy_loss.get("ar_alpha")
    if alpha is None:
        raise ValueError(
            f"{POLICY_LOSS_KEY}.loss_mode={LOSS_MODE} needs "
            f"{POLICY_LOSS_KEY}._target_={ARPolicyLossConfig.__module__}.ARPolicyLossConfig, which carries ar_alpha"
        )
    return float(alpha)


def _dual_clip(config: ActorConfig) -> float | None:
    """Return verl's dual-clip constant c, or None when `clip_ratio_c` is infinite (dual clip off)."""
    clip_ratio_c = float(config.get("clip_ratio_c", 3.0))
    if math.isinf(clip_ratio_c) and clip_ratio_c > 0:
        return None
    if not clip_ratio_c > 1.0:
        raise ValueError(f"{CLIP_RATIO_C_KEY} must be > 1 (or inf to turn dual clip off), got {clip_ratio_c}")
    return clip_ratio_c


@register_policy_loss(LOSS_MODE)  # type: ignore[arg-type]
def compute_policy_loss_ar(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Return verl's (loss, metrics) for the clipped surrogate on AR-reweighted advantages.

    Same signature and metric names as verl's `vanilla` loss (which it equals at α = 0), plus
    `actor/ar_weight_mean`. ε_low/ε_high are `clip_ratio_low`/`clip_ratio_high` (each falling back to
    `clip_ratio`), the dual clip is `clip_ratio_c`, and rollout-correction weights multiply the per-token
    loss as in vanilla.
    """
    if config is None:
        raise ValueError(f"the {LOSS_MODE} policy loss needs verl's actor config")
    alpha = ar_alpha_of(config)
    eps_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    eps_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    dual_clip = _dual_clip(config)
    mask = response_mask.bool()
    if not mask.any():
        # A micro-batch whose every response was rejected by rollout correction: no gradient, as in vanilla.
        zero = (log_prob * 0.0).sum()
        return zero, {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}

    weights = ar_weights(old_log_prob, alpha)
    per_token, clip_metrics = clipped_policy_loss(
        log_prob, old_log_prob, advantages * weights, mask, eps_low, eps_high, dual_clip
    )
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights
    loss = agg_loss(loss_mat=per_token, loss_mask=mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info)
    metrics = {
        # verl's names for the same quantities, so its dashboards read the same
        "actor/pg_clipfrac": (clip_metrics["clip_frac_low"] + clip_metrics["clip_frac_high"]).item(),
        "actor/ppo_kl": clip_metrics["approx_kl"].item(),
        "actor/pg_clipfrac_lower": clip_metrics["dual_clip_frac"].item(),
        "actor/ar_weight_mean": (weights[mask].mean()).item(),
    }
    return loss, metrics
