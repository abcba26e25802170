"""Advantage estimators for outcome rewards (docs/paper.md §2).

Responses are laid out as TRL and verl do: the G responses to one prompt are contiguous, so a batch of
B responses holds B / G groups. Outcome estimators return one advantage per response, shape (B,);
`token_advantages` broadcasts them over the response tokens.
"""

from __future__ import annotations

from typing import Literal

import torch

from lopti.core._validate import check_finite, check_group_size, check_mask

EPS = 1e-6
Estimator = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"]
ESTIMATORS: tuple[str, ...] = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline")


def _check_rewards(rewards: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one per response), got shape {list(rewards.shape)}")
    check_finite("rewards", rewards)
    return rewards if rewards.dtype == torch.float64 else rewards.float()  # at least float32, float64 kept


def _check_token_layout(rewards: torch.Tensor, response_mask: torch.Tensor) -> None:
    if rewards.dim() != 1 or response_mask.dim() != 2 or rewards.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"rewards must be (B,) and response_mask (B, T); got {list(rewards.shape)} and {list(response_mask.shape)}"
        )


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    rewards = _check_rewards(rewards)
    check_group_size(rewards.numel(), group_size)
    return rewards.view(-1, group_size)


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """Return Â_i = (r_i − mean(r)) / (std(r) + eps) per group, std unbiased (docs/paper.md §2).

    A singleton group has no spread to measure: it uses mean 0 and std 1, so its advantage is
    r / (1 + eps), as in the authors' code.
    """
    grouped = _groups(rewards, group_size)
    if group_size == 1:
        return (grouped / (1.0 + eps)).view(-1)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + eps)).view(-1)


def dr_grpo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Return r_i − mean(r) per group: Dr.GRPO drops the std division (singleton: mean 0)."""
    grouped = _groups(rewards, group_size)
    if group_size == 1:
        return grouped.view(-1).clone()
    return (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Return r_i − mean_{j≠i} r_j, the leave-one-out baseline (singleton: baseline 0)."""
    grouped = _groups(rewards, group_size)
    if group_size == 1:
        return grouped.view(-1).clone()
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others_mean).view(-1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Return (v − mean) / sqrt(var + eps) over the masked entries (unbiased var), zero elsewhere."""
    mask = check_mask("response_mask", mask, values)
    count = mask.sum()
    mean = values[mask].mean()
    var = ((values - mean)[mask] ** 2).sum() / (count - 1).clamp(min=1)
    return torch.where(mask, (values - mean) * torch.rsqrt(var + eps), torch.zeros_like(values))


def reinforce_pp_advantages(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Return REINFORCE++ token advantages, shape (B, T) (docs/paper.md §2).

    With γ = 1 and an outcome reward, every token's return is its response's reward; the returns are
    whitened over all valid tokens of the batch, so longer responses weigh more in the statistics.
    """
    _check_token_layout(rewards, response_mask)
    rewards = _check_rewards(rewards)
    returns = rewards[:, None].expand(response_mask.shape)
    return masked_whiten(returns, response_mask)


def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor, group_size: int, response_mask: torch.Tensor
) -> torch.Tensor:
    """Return REINFORCE++-baseline token advantages (B, T): group mean removed, then batch-whitened."""
    centered = dr_grpo_advantages(rewards, group_size)
    return reinforce_pp_advantages(centered, response_mask)


def token_advantages(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    estimator: Estimator = "grpo",
) -> torch.Tensor:
    """Return per-token advantages (B, T) for `estimator`, zero on padding."""
    _check_token_layout(rewards, response_mask)
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(rewards, response_mask)
    if estimator == "reinforce_pp_baseline":
        return reinforce_pp_baseline_advantages(rewards, group_size, response_mask)
    outcome = {"grpo": grpo_advantages, "dr_grpo": dr_grpo_advantages, "rloo": rloo_advantages}
    if estimator not in outcome:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    per_response = outcome[estimator](rewards, group_size)
    return per_response[:, None] * response_mask.to(per_response.dtype)
