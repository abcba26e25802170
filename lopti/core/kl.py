"""KL estimators between the policy and a reference policy, per token (docs/paper.md §2)."""

from __future__ import annotations

from typing import Literal

import torch

from lopti.core._validate import check_same_shape

KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: KLEstimator = "k3",
    mask: torch.Tensor | None = None,
    clamp: bool = True,
) -> torch.Tensor:
    """Return a per-token estimate of KL(π ‖ π_ref) from sampled-token log-probs, zero where `mask` is off.

    - k1: log π − log π_ref (unbiased, high variance, can be negative);
    - k2: ½ (log π − log π_ref)²;
    - k3 ("low_var_kl"): π_ref/π − log(π_ref/π) − 1, with log(π_ref/π) clamped to [−5, 5] and the
      value to [−10, 10], as in the authors' code; with `clamp` False, unclamped (TRL's k3).
    Passing a Lopti phase mask gives each token its KL penalty in exactly one phase.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        kl = log_ratio
    elif estimator == "k2":
        kl = 0.5 * log_ratio.square()
    elif estimator == "k3":
        ref_over_pi = (-log_ratio).clamp(-5.0, 5.0) if clamp else -log_ratio
        kl = ref_over_pi.exp() - ref_over_pi - 1.0
        kl = kl.clamp(-10.0, 10.0) if clamp else kl
    else:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    if mask is None:
        return kl
    check_same_shape(logprobs=logprobs, mask=mask)
    return kl * mask.to(kl.dtype)
