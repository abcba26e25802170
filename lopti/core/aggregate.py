"""Reduce a (B, T) per-token loss to a scalar (docs/paper.md §2 uses token-mean)."""

from __future__ import annotations

from typing import Literal

import torch

from lopti.core._validate import check_mask

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGGREGATIONS: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def aggregate_loss(
    per_token: torch.Tensor,
    response_mask: torch.Tensor,
    mode: Aggregation = "token-mean",
    max_length: int | None = None,
    num_tokens: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Return the scalar loss; padding never counts.

    - token-mean: Σ loss / #tokens over the whole batch (the paper's choice);
    - seq-mean-token-mean: mean over responses of each response's token mean;
    - seq-mean-token-sum: mean over responses of each response's token sum;
    - seq-mean-token-sum-norm: Σ loss / (B · max_length), Dr.GRPO's fixed divisor.
    Responses with no valid token are left out of the per-sequence means. `num_tokens` replaces the
    token-mean denominator, for a count over a whole accumulated batch (DAPO-style normalisation).
    """
    mask = check_mask("response_mask", response_mask, per_token)
    masked = per_token * mask.to(per_token.dtype)
    if mode == "token-mean":
        return masked.sum() / (mask.sum() if num_tokens is None else num_tokens)
    if mode == "seq-mean-token-sum-norm":
        if max_length is None or max_length < 1:
            raise ValueError(f"max_length must be a positive int for {mode!r}, got {max_length}")
        if max_length < per_token.shape[1]:
            raise ValueError(f"max_length={max_length} is shorter than the responses ({per_token.shape[1]})")
        return masked.sum() / (per_token.shape[0] * max_length)
    lengths = mask.sum(dim=1)
    nonempty = lengths > 0
    sums = masked.sum(dim=1)[nonempty]
    if mode == "seq-mean-token-mean":
        return (sums / lengths[nonempty]).mean()
    if mode == "seq-mean-token-sum":
        return sums.mean()
    raise ValueError(f"mode must be one of {AGGREGATIONS}, got {mode!r}")
