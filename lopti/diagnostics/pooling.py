"""The probe's batches pooled into one JSON-ready result.

Shares and the Proposition 4.2 checks pool the tokens of every batch. Correct ratios are computed per
batch, then averaged with a 95% t interval over the batches (lopti/diagnostics/intervals.py): tokens of one
batch share a gradient step, so they are not independent draws, while batches are. Every other method's
ratios also get the interval of their paired difference from GRPO's on the same batches, and each credit
preset's shares (tokens kept, mean weight, tokens selected) their interval over the batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from lopti.core.bound import grad_norm_bounds
from lopti.core.buckets import bucket_shares, update_sums
from lopti.diagnostics.intervals import interval, paired_differences
from lopti.diagnostics.rollouts import Rollouts

SCATTER_POINTS = 4000  # tokens kept for the gradient-vs-π figure
SIGNS = {"positive": 1.0, "negative": -1.0}


@dataclass
class BatchMeasure:
    """One batch's numbers per response token (flattened), and each update's Δπ, kept until pooling."""

    rollouts: Rollouts
    index: torch.Tensor  # π_old bucket
    advantages: torch.Tensor
    pi: torch.Tensor  # π_old
    logit_norm: torch.Tensor  # ‖∂(−log π)/∂z‖
    hidden_norm: torch.Tensor  # ‖∂(−log π)/∂h‖
    deltas: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)  # (regime, update) → Δπ
    grad_norms: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # one per optimizer step
    credit: dict[str, dict[str, float]] = field(default_factory=dict)  # method → credit share → its batch value


def correct_ratios(delta: torch.Tensor, index: torch.Tensor, advantages: torch.Tensor, labels: list[str]) -> dict:
    """Return {bucket or "all": {"positive", "negative", "both": share moved the way Â asks, None without tokens}}."""
    sums = update_sums(index, delta.double(), advantages, len(labels))
    columns = torch.cat([sums, sums.sum(dim=1, keepdim=True)], dim=1).tolist()
    positive, rose, _, negative, fell, _ = columns
    table = {}
    for k, label in enumerate([*labels, "all"]):
        both = positive[k] + negative[k]
        table[label] = {
            "positive": rose[k] / positive[k] if positive[k] else None,
            "negative": fell[k] / negative[k] if negative[k] else None,
            "both": (rose[k] + fell[k]) / both if both else None,
        }
    return table


def _summary(values: torch.Tensor) -> dict[str, Any]:
    if values.numel() == 0:
        return {"n": 0, "mean": None, "mean_abs": None, "median": None}
    values = values.double()
    return {
        "n": values.numel(),
        "mean": values.mean().item(),
        "mean_abs": values.abs().mean().item(),
        "median": values.median().item(),
    }


def delta_breakdown(delta: torch.Tensor, index: torch.Tensor, advantages: torch.Tensor, labels: list[str]) -> dict:
    """Return Δπ summaries and correct ratios per bucket and advantage sign (zero advantages left out)."""
    ratios = correct_ratios(delta, index, advantages, labels)
    table = {}
    for k, label in enumerate([*labels, "all"]):
        inside = index >= 0 if label == "all" else index == k
        table[label] = {sign: _summary(delta[inside & (advantages * s > 0)]) for sign, s in SIGNS.items()}
        table[label]["correct_ratio"] = ratios[label]
    return table


def _correlation(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Return Pearson's r, or None when either side is constant (r is undefined there, not NaN in JSON)."""
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return torch.corrcoef(torch.stack([x.double(), y.double()]))[0, 1].item()


def bound_summary(pi, logit_norm, hidden_norm, weight: torch.Tensor, temperature: float, seed: int = 0) -> dict:
    """Return Proposition 4.2 checks at the logits and the last hidden state, with a sample for the figure.

    At the logits the bounds are exact. At h (z = W h / T) the norm is at most σ_max(W)/T · √2 (1 − π),
    always, and at least σ_min(W)/T · √(N/(N−1)) (1 − π) only if π − e_k has no part in Wᵀ's null space (it
    does, since N > d): the lower bound is not guaranteed.
    """
    singular = torch.linalg.svdvals(weight) / temperature
    sigma_min, sigma_max = singular.min().item(), singular.max().item()
    lower, upper = grad_norm_bounds(1.0 - pi, weight.shape[0])
    slack = 1e-9 * torch.ones_like(pi)  # float64 rounding at π → 1, where both sides vanish
    inside_logits = (logit_norm >= lower - slack) & (logit_norm <= upper + slack)
    keep = torch.randperm(len(pi), generator=torch.Generator().manual_seed(seed))[:SCATTER_POINTS]
    return {
        "tokens": len(pi),
        "vocab_size": weight.shape[0],
        "logits": {"inside_fraction": inside_logits.double().mean().item()},
        "hidden": {
            "sigma_min": sigma_min,
            "sigma_max": sigma_max,
            "upper_holds_fraction": (hidden_norm <= sigma_max * upper + slack).double().mean().item(),
            "lower_holds_fraction": (hidden_norm >= sigma_min * lower - slack).double().mean().item(),
            "correlation_with_1_minus_pi": _correlation(hidden_norm, 1 - pi),
        },
        "scatter": {
            key: values[keep].tolist()
            for key, values in (("pi", pi), ("logit_norm", logit_norm), ("hidden_norm", hidden_norm))
        },
    }


def _shares(index: torch.Tensor, advantages: torch.Tensor, labels: list[str], weights=None) -> dict[str, dict]:
    """Return each bucket's share of the tokens (or of `weights`): over all, Â > 0 and Â < 0 tokens."""
    sides = {"all": index >= 0, "positive": advantages > 0, "negative": advantages < 0}
    return {
        side: dict(
            zip(labels, bucket_shares(index.masked_fill(~where, -1), len(labels), weights).tolist(), strict=True)
        )
        for side, where in sides.items()
    }


def pool_update(
    measures: list[BatchMeasure], key: tuple[str, str], labels: list[str], grpo: list[dict] | None = None
) -> tuple[dict[str, Any], list[dict]]:
    """Return one update's pooled entry (Δπ breakdown; gradient norms and correct ratios with intervals over
    batches; with `grpo`'s per-batch ratios, the paired differences from them) and its per-batch ratios."""
    present = [m for m in measures if key in m.deltas]
    per_batch = [correct_ratios(m.deltas[key], m.index, m.advantages, labels) for m in present]
    entry: dict[str, Any] = {
        "grad_norm": [
            interval([m.grad_norms[key][step] for m in present]) for step in range(len(present[0].grad_norms[key]))
        ],
        "delta_pi": delta_breakdown(
            torch.cat([m.deltas[key] for m in present]),
            torch.cat([m.index for m in present]),
            torch.cat([m.advantages for m in present]),
            labels,
        ),
        "correct_ratio": {
            label: {
                sign: interval([b[label][sign] for b in per_batch]) | {"per_batch": [b[label][sign] for b in per_batch]}
                for sign in SIGNS
            }
            for label in [*labels, "all"]
        },
    }
    if grpo is not None:
        entry["minus_grpo"] = {
            label: {
                sign: interval(paired_differences([b[label][sign] for b in per_batch], [b[label][sign] for b in grpo]))
                for sign in SIGNS
            }
            for label in [*labels, "all"]
        }
    return entry, per_batch


def pool(measures: list[BatchMeasure], labels: list[str], weight: torch.Tensor, temperature: float) -> dict[str, Any]:
    """Return the pooled result of the probe's batches (see the module docstring)."""
    index, advantages = torch.cat([m.index for m in measures]), torch.cat([m.advantages for m in measures])
    pi, logit_norm, hidden_norm = (
        torch.cat([getattr(m, k) for m in measures]) for k in ("pi", "logit_norm", "hidden_norm")
    )
    tokens = _shares(index, advantages, labels)
    exact = _shares(index, advantages, labels, advantages.abs().double() * logit_norm)
    proxy = _shares(index, advantages, labels, advantages.abs().double() * (1 - pi))
    rewards = [r for m in measures for r in m.rollouts.rewards]
    result: dict[str, Any] = {
        "batches": len(measures),
        "responses": len(rewards),
        "num_generations": measures[0].rollouts.num_generations,
        "temperature": temperature,
        "tokens": len(index),
        "reward_mean": sum(rewards) / len(rewards),
        "groups_with_reward_spread": sum(
            len(set(m.rollouts.rewards[i : i + m.rollouts.num_generations])) > 1
            for m in measures
            for i in range(0, len(m.rollouts), m.rollouts.num_generations)
        ),
        "buckets": labels,
        "token_share": tokens["all"],
        "token_share_positive": tokens["positive"],
        "token_share_negative": tokens["negative"],
        # Each bucket's share of Σ|Â|·‖∂(−log π)/∂z‖: exact, and with the (1 − π) bound for the norm.
        "grad_share_exact": exact["all"],
        "grad_share_exact_positive": exact["positive"],
        "grad_share_exact_negative": exact["negative"],
        "grad_share_1_minus_pi": proxy["all"],
        "bound": bound_summary(pi, logit_norm, hidden_norm, weight, temperature),
        "warnings": [f"bucket {label} holds no response token" for label, s in tokens["all"].items() if s == 0],
    }
    flat = [k for k, m in enumerate(measures) if not m.deltas]
    if flat:
        result["warnings"].append(
            f"{len(flat)} of {len(measures)} batches (numbers {', '.join(map(str, flat))}) gave every response of "
            "each group the same reward: all advantages are zero, no update moves any token, and they are left "
            "out of gradient norms, Δπ and correct ratios"
        )
    keys = list(dict.fromkeys(key for m in measures for key in m.deltas))
    updates: dict[str, dict[str, Any]] = {}
    grpo_batches: dict[str, list] = {}
    for regime, name in sorted(keys, key=lambda k: k[1] != "grpo"):  # GRPO first: the others pair with it
        baseline = grpo_batches.get(regime) if name != "grpo" and not name.startswith("only ") else None
        entry, per_batch = pool_update(measures, (regime, name), labels, baseline)
        updates.setdefault(regime, {})[name] = entry
        if name == "grpo":
            grpo_batches[regime] = per_batch
    # each preset's share of tokens kept, weight mean, share selected (the trainer's credit/*), over batches
    methods = dict.fromkeys(name for m in measures for name in m.credit)
    result["credit"] = {
        method: {
            key: interval([m.credit[method][key] for m in measures if method in m.credit])
            for key in dict.fromkeys(k for m in measures for k in m.credit.get(method, {}))
        }
        for method in methods
    }
    regimes = dict.fromkeys(regime for regime, _ in keys)  # in the order measured
    result["updates"] = {r: {name: updates[r][name] for regime, name in keys if regime == r} for r in regimes} or None
    return result
