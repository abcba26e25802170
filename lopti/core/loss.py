"""The clipped policy-gradient surrogate with asymmetric and dual clipping (docs/paper.md §2)."""

from __future__ import annotations

import torch

from lopti.core._validate import check_mask, check_same_shape
from lopti.core.constants import DUAL_CLIP, EPS_HIGH, EPS_LOW

# exp() of a log-ratio beyond this overflows float32; the clip makes such tokens gradient-free anyway.
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

    log_ratio = (logprobs - old_logprobs.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    negative = advantages < 0
    if dual_clip is not None:
        loss = torch.where(negative, torch.minimum(loss, -advantages * dual_clip), loss)
    loss = loss * mask.to(loss.dtype)

    with torch.no_grad():
        count = mask.sum()
        ratio = ratio.detach()

        def share(selected: torch.Tensor) -> torch.Tensor:
            return (selected & mask).sum() / count

        metrics = {
            "clip_frac_low": share((ratio < 1.0 - eps_low) & negative),
            "clip_frac_high": share((ratio > 1.0 + eps_high) & (advantages > 0)),
            "dual_clip_frac": share((ratio > (dual_clip or float("inf"))) & negative),
            "approx_kl": -(log_ratio.detach() * mask).sum() / count,
            "ratio_mean": (ratio * mask).sum() / count,
        }
    return loss, metrics
