"""Tokens bucketed by their rollout probability π_old, the lens of the paper's analysis (docs/paper.md §9).

The paper splits response tokens into probability quartiles [0, .25), [.25, .5), [.5, .75), [.75, 1] and
shows that the lowest bucket carries most of the gradient. Edges are any increasing values from 0 to 1;
every bucket is half-open except the last, which includes 1.
"""

from __future__ import annotations

import itertools
import math

import torch

from lopti.core._validate import check_mask

QUARTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def check_edges(edges: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """Return the edges as a tuple, or raise a ValueError unless they rise strictly from 0 to 1."""
    edges = tuple(float(e) for e in edges)
    if len(edges) < 2 or edges[0] != 0.0 or edges[-1] != 1.0 or any(b <= a for a, b in itertools.pairwise(edges)):
        raise ValueError(f"bucket edges must rise strictly from 0 to 1, like 0,0.25,0.5,0.75,1; got {list(edges)}")
    return edges


def bucket_labels(edges: tuple[float, ...] | list[float]) -> list[str]:
    """Return "[0.00,0.25)"-style labels, the last one closed."""
    edges = check_edges(edges)
    last = len(edges) - 2
    return [f"[{a:.2f},{b:.2f}{']' if i == last else ')'}" for i, (a, b) in enumerate(itertools.pairwise(edges))]


def probability_buckets(
    old_logprobs: torch.Tensor, response_mask: torch.Tensor, edges: tuple[float, ...] | list[float] = QUARTILES
) -> torch.Tensor:
    """Return each token's bucket index by π_old = exp(old_logprobs) (long, same shape), −1 on padding."""
    edges = check_edges(edges)
    mask = check_mask("response_mask", response_mask, old_logprobs)
    # Compare in log space, as `isolation.low_prob_mask` does, so a bucket edge at η splits tokens exactly
    # where Lopti does; p == edge goes to the bucket the edge opens.
    inner = torch.tensor([math.log(e) for e in edges[1:-1]], dtype=old_logprobs.dtype, device=old_logprobs.device)
    index = torch.bucketize(old_logprobs.detach().contiguous(), inner, right=True)
    return torch.where(mask, index, torch.full_like(index, -1))


def bucket_totals(index: torch.Tensor, buckets: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return each bucket's token count (float64), or its sum of `weights`; padding (index −1) never counts."""
    valid = index >= 0
    values = torch.ones_like(index, dtype=torch.float64) if weights is None else weights.detach().double()
    totals = torch.zeros(buckets, dtype=torch.float64, device=index.device)
    return totals.index_add_(0, index[valid], values[valid])


def bucket_shares(index: torch.Tensor, buckets: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return each bucket's share (float64, sums to 1) of the tokens, or of `weights` summed over tokens.

    All zeros when there is nothing to share (no token, or zero weight).
    """
    totals = bucket_totals(index, buckets, weights)
    whole = totals.sum()
    return totals / whole if whole > 0 else totals


UPDATE_SUMS = ("positive", "rose", "dlogp_positive", "negative", "fell", "dlogp_negative")


def update_sums(index: torch.Tensor, delta: torch.Tensor, advantages: torch.Tensor, buckets: int) -> torch.Tensor:
    """Return, per bucket, the sums behind an update's correct ratios: a (6, buckets) float64 tensor.

    Rows follow UPDATE_SUMS: the count of tokens with Â > 0, how many of them moved up (Δ > 0), their Σ Δ,
    and the same for Â < 0 with "moved down". `delta` is each token's change in log π (or π: the sign is the
    same). Correct ratio of a sign = moved / count; mean Δ = Σ Δ / count. Sums, not ratios, so that batches,
    micro-batches and processes add up before dividing. Tokens with Â = 0 and padding (index −1) never count.
    """
    rows = []
    for sign in (1.0, -1.0):
        side = index.masked_fill(~(advantages * sign > 0), -1)
        rows += [
            bucket_totals(side, buckets),
            bucket_totals(side, buckets, (delta * sign > 0).double()),
            bucket_totals(side, buckets, delta),
        ]
    return torch.stack(rows)
