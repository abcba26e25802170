"""Per-token policy surrogates: the clipped one with asymmetric and dual clipping (docs/paper.md §2), and TRL's
CISPO and SAPO, which AR's weights and Lopti's zeroed advantages enter the same way (docs/guides/trl.md)."""

from __future__ import annotations

import torch

from lopti.core._validate import check_mask, check_same_shape
from lopti.core.constants import DUAL_CLIP, EPS_HIGH, EPS_LOW

# exp() of a log-ratio beyond this overflows float32; every surrogate here bounds such a token's weight anyway.
MAX_LOG_RATIO = 20.0


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    dual_clip: float | None = DUAL_CLIP,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return the per-token loss (B, T), zero on padding, and detached metrics.

    loss = max(−Â·r, −Â·clip(r, 1 − ε_low, 1 + ε_high)) with r = π_θ/π_old; for Â < 0 the loss is
    further capped at −c·Â (dual clip), so a huge ratio on a bad token cannot blow up the update.
    Advantages are per token, so AR weights and Lopti masks are applied before this call.
    Metrics (means over valid tokens): clip_frac_low (r < 1 − ε_low, Â < 0), clip_frac_high
    (r > 1 + ε_high, Â > 0), dual_clip_frac (r > c, Â < 0), approx_kl (mean log π_old − log π_θ),
    ratio_mean.
    """
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    mask = check_mask("response_mask", response_mask, logprobs)
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low and eps_high must be ≥ 0, got {eps_low} and {eps_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")

    log_ratio = _log_ratio(logprobs, old_logprobs)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    negative = advantages < 0
    if dual_clip is not None:
        loss = torch.where(negative, torch.minimum(loss, -advantages * dual_clip), loss)
    loss = loss * mask.to(loss.dtype)

    with torch.no_grad():
        ratio = ratio.detach()
        metrics = {
            "clip_frac_low": _share((ratio < 1.0 - eps_low) & negative, mask),
            "clip_frac_high": _share((ratio > 1.0 + eps_high) & (advantages > 0), mask),
            "dual_clip_frac": _share((ratio > (dual_clip or float("inf"))) & negative, mask),
            **_ratio_metrics(log_ratio, mask),
        }
    return loss, metrics


def cispo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    max_ratio: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return CISPO's per-token loss (B, T), zero on padding, and detached metrics.

    loss = −sg(min(r, ε_max))·Â·log π_θ (MiniMax-M1, arXiv 2506.13585): the ratio is capped and detached
    instead of clipping the token out, so every token keeps a REINFORCE gradient Â·min(r, ε_max)·∇log π.
    Per-token advantages (AR weights, Lopti's zeroed tokens) enter as in `clipped_policy_loss`.
    Metrics: cispo_clip_frac (r > ε_max, Â > 0, TRL's `cispo_clip_ratio`), approx_kl, ratio_mean.
    """
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    mask = check_mask("response_mask", response_mask, logprobs)
    log_ratio = _log_ratio(logprobs, old_logprobs)
    ratio = log_ratio.exp().detach()
    loss = -ratio.clamp(max=max_ratio) * advantages * logprobs * mask.to(logprobs.dtype)
    clipped = _share((ratio > max_ratio) & (advantages > 0), mask)
    return loss, {"cispo_clip_frac": clipped, **_ratio_metrics(log_ratio, mask)}


def sapo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    temperature_pos: float,
    temperature_neg: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return SAPO's per-token loss (B, T), zero on padding, and detached metrics.

    loss = −(4/τ)·σ(τ·(r − 1))·Â with τ = τ_pos where Â > 0, else τ_neg (Soft Adaptive Policy Optimization,
    arXiv 2511.20347): a smooth gate in place of the hard clip, whose gradient 4·σ'(τ(r − 1))·Â·r·∇log π is
    Â·∇log π on-policy (r = 1) and fades as r leaves 1. Metrics: approx_kl, ratio_mean.
    """
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    mask = check_mask("response_mask", response_mask, logprobs)
    log_ratio = _log_ratio(logprobs, old_logprobs)
    temperature = torch.where(advantages > 0, temperature_pos, temperature_neg)
    gate = torch.sigmoid(temperature * (log_ratio.exp() - 1.0)) * 4.0 / temperature
    loss = -gate * advantages * mask.to(gate.dtype)
    return loss, _ratio_metrics(log_ratio, mask)


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Return log r = log π_θ − log π_old, clamped at ±`MAX_LOG_RATIO`."""
    return (logprobs - old_logprobs.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _share(selected: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (selected & mask).sum() / mask.sum()


def _ratio_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Return approx_kl (mean log π_old − log π_θ) and ratio_mean over the valid tokens, detached."""
    with torch.no_grad():
        log_ratio, count = log_ratio.detach(), mask.sum()
        return {"approx_kl": -(log_ratio * mask).sum() / count, "ratio_mean": (log_ratio.exp() * mask).sum() / count}
