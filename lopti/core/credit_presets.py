"""Per-token credit presets: the published neighbours of AR and Lopti, each as a credit step.

Each preset is a factory: its keyword defaults are the paper's constants, it checks them, and it returns
a step `step(context) -> TokenCredit` (see `lopti.core.credit`). "The batch" of a paper is here the
micro-batch the loss sees on one process. Selections use the current policy's detached log-probs and
entropies from the loss's own forward pass, so no preset needs an extra forward or backward pass.
docs/guides/token-credit.md gives each method's equation, constants and reported gains.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from lopti.core._validate import check_unit_interval
from lopti.core.credit import CreditContext, CreditStep, TokenCredit


def _entropies(context: CreditContext, preset: str) -> torch.Tensor:
    if context.entropies is None:
        raise ValueError(f"credit preset {preset!r} needs per-token entropies; pass entropies= to token_objective")
    return context.entropies.detach()


def _quantile(values: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """Return the q-quantile of `values` over `mask` (linear interpolation, as torch.quantile)."""
    return torch.quantile(values.detach()[mask].float(), q).to(values.dtype)


def _positions(flat_indices: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return a bool mask shaped like `like`, True at the given flat indices."""
    mask = torch.zeros(like.numel(), dtype=torch.bool, device=like.device)
    mask[flat_indices] = True
    return mask.view(like.shape)


def _top_share(values: torch.Tensor, candidates: torch.Tensor, share: float) -> torch.Tensor:
    """Return the ⌈share · #candidates⌉ candidates with the largest values, as a bool mask."""
    count = int(candidates.sum())
    if count == 0:
        return torch.zeros_like(candidates)
    ranked = values.detach().float().masked_fill(~candidates, -math.inf).flatten()
    return _positions(ranked.topk(math.ceil(share * count)).indices, candidates)


def _covariance(context: CreditContext) -> torch.Tensor:
    """Return (Â_t − mean Â)·(log π_t − mean log π) per token, means over the response tokens (2505.22617)."""
    valid = context.response_mask
    count = valid.sum()
    advantages, logprobs = context.advantages.detach().float(), context.logprobs.detach().float()
    centred_advantages = advantages - (advantages * valid).sum() / count
    centred_logprobs = logprobs - (logprobs * valid).sum() / count
    return centred_advantages * centred_logprobs


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def stapo(prob_threshold: float = 0.01, entropy_quantile: float = 0.05) -> CreditStep:
    """Return STAPO's Silencing-Spurious-Tokens step (Liu et al., arXiv 2602.15620).

    A token is spurious when Â_t > 0, π_θ(o_t) < τ_p and H_t < τ_h: a rare pick at a confident position
    that inherits a correct answer's full reward. Spurious tokens are dropped from the objective and the
    loss is renormalised over the remaining tokens. τ_p = `prob_threshold`, τ_h = the `entropy_quantile`
    quantile of the batch's token entropies. The paper's exact constants could not be read (only its
    abstract and a secondary description were reachable); τ_p = 0.01 and τ_h = the 5th percentile are
    that description's values.
    """
    check_unit_interval("prob_threshold", prob_threshold, open_low=True, open_high=True)
    check_unit_interval("entropy_quantile", entropy_quantile)

    def step(context: CreditContext) -> TokenCredit:
        valid = context.response_mask
        entropies = _entropies(context, "stapo")
        rare = context.logprobs.detach() < math.log(prob_threshold)
        confident = entropies < _quantile(entropies, valid, entropy_quantile)
        return TokenCredit(drop=valid & (context.advantages > 0) & rare & confident)

    return step


def high_entropy(rho: float = 0.2) -> CreditStep:
    """Return the high-entropy-minority step (Wang et al., "Beyond the 80/20 Rule", arXiv 2506.01939).

    Only the top-ρ share of the batch's tokens by entropy ("forking tokens") keep their policy gradient:
    keep_t = [H_t ≥ τ_ρ], τ_ρ the (1 − ρ) quantile of the entropies; ρ = 0.2 in the paper. The loss
    denominator still counts every token, as in the paper's DAPO objective.
    """
    check_unit_interval("rho", rho, open_low=True)

    def step(context: CreditContext) -> TokenCredit:
        entropies = _entropies(context, "high_entropy")
        return TokenCredit(keep=entropies >= _quantile(entropies, context.response_mask, 1.0 - rho))

    return step


def clip_cov(ratio: float = 2e-4, cov_low: float = 1.0, cov_high: float = 5.0) -> CreditStep:
    """Return Clip-Cov (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617).

    Cov_t = (Â_t − mean Â)(log π_t − mean log π). Among the tokens with ω_low < Cov_t < ω_high that the
    surrogate's clip does not already hold, max(1, ⌊r·N⌋) chosen at random (N = response tokens) are
    detached from the policy gradient. Paper: r = 2·10⁻⁴, ω_low = 1, ω_high = 5.
    """
    check_unit_interval("ratio", ratio, open_low=True)
    if not cov_low < cov_high:
        raise ValueError(f"cov_low must be < cov_high, got {cov_low} and {cov_high}")

    def step(context: CreditContext) -> TokenCredit:
        valid = context.response_mask
        covariance = _covariance(context)
        ratio_now = (context.logprobs.detach() - context.old_logprobs.detach()).exp()
        held = ((context.advantages > 0) & (ratio_now > 1.0 + context.eps_high)) | (
            (context.advantages < 0) & (ratio_now < 1.0 - context.eps_low)
        )
        candidates = (valid & ~held & (covariance > cov_low) & (covariance < cov_high)).flatten().nonzero().squeeze(1)
        budget = max(1, int(ratio * int(valid.sum())))
        chosen = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:budget]]
        detached = _positions(chosen, valid)
        return TokenCredit(keep=~detached, selected=detached)

    return step


def kl_cov(ratio: float = 2e-3, beta: float = 1.0) -> CreditStep:
    """Return KL-Cov (Cui et al., arXiv 2505.22617): a KL penalty on the highest-covariance tokens.

    The max(1, ⌊k·N⌋) tokens with the largest Cov_t (see `clip_cov`) get β·|log π_θ − log π_old| added
    to their loss. Paper: k = 2·10⁻³ (Qwen2.5-7B; 2·10⁻⁴ for 32B), β = 1. The authors' code drops the
    surrogate's clip for KL-Cov; here the configured clip stays (set a wide epsilon to match).
    """
    check_unit_interval("ratio", ratio, open_low=True)
    _check_positive("beta", beta)

    def step(context: CreditContext) -> TokenCredit:
        valid = context.response_mask
        covariance = _covariance(context).masked_fill(~valid, -math.inf).flatten()
        selected = _positions(covariance.topk(max(1, int(ratio * int(valid.sum())))).indices, valid)
        distance = (context.logprobs - context.old_logprobs.detach()).abs()
        return TokenCredit(penalty=beta * distance * selected, selected=selected)

    return step


def w_reinforce(positive_weight: float = 0.1) -> CreditStep:
    """Return W-REINFORCE's weighting (Zhu et al., "The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning", arXiv 2506.01347): L = λ·L_PSR + L_NSR.

    Tokens of positive-advantage responses get weight λ = `positive_weight` (0.1 in the paper), the rest
    1. The paper uses rewards ±1 without a baseline; here the weight applies to the configured
    advantages' sign.
    """
    check_unit_interval("positive_weight", positive_weight)

    def step(context: CreditContext) -> TokenCredit:
        advantages = context.advantages
        return TokenCredit(weights=torch.ones_like(advantages).masked_fill(advantages > 0, positive_weight))

    return step


def tr_grpo(
    alpha: float = 4.0, tau: float = 1.0, mu: float = 0.5, lower: float = 0.1, upper: float = 1.0
) -> CreditStep:
    """Return TR-GRPO's probability shaping (Le et al., arXiv 2511.00066).

    w_t = clip(α·(σ(π_θ(o_t)/τ) − μ), L, U), an increasing function of the token's probability: AR's
    linear α·π + (1 − α) is the same idea with another shape. The paper's constants could not be read
    (only its abstract was reachable; the formula is as public re-implementations state it). The
    defaults are ours: with τ = 1, μ = 0.5, α = 4 the weight rises from the floor L = 0.1 at π ≤ 0.1 to
    0.92 at π = 1, close to AR with α = 0.9.
    """
    _check_positive("alpha", alpha)
    _check_positive("tau", tau)
    if not 0 <= lower <= upper:
        raise ValueError(f"lower and upper must satisfy 0 ≤ lower ≤ upper, got {lower} and {upper}")

    def step(context: CreditContext) -> TokenCredit:
        probs = context.logprobs.detach().exp()
        return TokenCredit(weights=(alpha * (torch.sigmoid(probs / tau) - mu)).clamp(lower, upper))

    return step


def stare(
    top_ratio: float = 0.1,
    positive_weight: float = 1.1,
    negative_weight: float = 0.9,
    target_entropy: float = 0.3,
    two_sided: bool = False,
) -> CreditStep:
    """Return STARE (Luo et al., arXiv 2606.19236): surprisal-guided token advantage reweighting.

    Within positive-advantage tokens, the top `top_ratio` by surprisal −log π_θ (L+) get weight W; with
    `two_sided` (the paper's C2 variant) the top negative-advantage ones (L−) get M. The gate: weights
    apply only while the batch's mean entropy is below the target, else this is plain GRPO. Like AR it
    reweights by probability, but in the other direction for L+: it amplifies rare correct tokens to keep
    entropy up. Constants as the authors' public description for 7B: P = 10%, W = 1.1, M = 0.9,
    H_tgt = 0.3 (14B/32B: W = 1.05, M = 0.95). The authors gate on the RL step's batch entropy.
    """
    check_unit_interval("top_ratio", top_ratio, open_low=True)
    if positive_weight < 1.0 or not 0.0 <= negative_weight <= 1.0:
        raise ValueError(
            f"need positive_weight ≥ 1 and 0 ≤ negative_weight ≤ 1, got {positive_weight}, {negative_weight}"
        )
    _check_positive("target_entropy", target_entropy)

    def step(context: CreditContext) -> TokenCredit:
        valid, advantages = context.response_mask, context.advantages
        entropies = _entropies(context, "stare")
        surprisal = -context.logprobs.detach()
        positive = _top_share(surprisal, valid & (advantages > 0), top_ratio)
        negative = (
            _top_share(surprisal, valid & (advantages < 0), top_ratio) if two_sided else torch.zeros_like(positive)
        )
        below_target = (entropies * valid).sum() / valid.sum() < target_entropy  # a tensor: no host sync
        weights = torch.ones_like(advantages)
        weights = torch.where(positive & below_target, positive_weight, weights)
        weights = torch.where(negative & below_target, negative_weight, weights)
        return TokenCredit(weights=weights, selected=positive | negative)

    return step


PRESETS: dict[str, Callable[..., CreditStep]] = {
    "stapo": stapo,
    "high_entropy": high_entropy,
    "clip_cov": clip_cov,
    "kl_cov": kl_cov,
    "w_reinforce": w_reinforce,
    "tr_grpo": tr_grpo,
    "stare": stare,
}
# Pairs that are alternatives, not parts: the same tokens treated twice over.
INCOMPATIBLE = {
    frozenset({"clip_cov", "kl_cov"}): "two treatments of the same high-covariance tokens; choose one",
}


def make_credit_steps(
    names: Sequence[str], constants: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, CreditStep]:
    """Return {name: step} for the named presets, each built with its `constants` (paper's by default)."""
    constants = constants or {}
    problems = credit_problems(names, constants)
    if problems:
        raise ValueError("; ".join(problems))
    return {name: PRESETS[name](**constants.get(name, {})) for name in names}


def credit_problems(
    names: Sequence[str], constants: Mapping[str, Mapping[str, Any]], ar_alpha: float = 0.0
) -> list[str]:
    """Return one line per problem with a preset selection: names, constants, combinations."""
    problems = [
        f"token_credit: unknown preset {n!r}; choose from {', '.join(PRESETS)}" for n in names if n not in PRESETS
    ]
    problems += [f"token_credit: {n!r} is listed twice" for n in sorted({n for n in names if list(names).count(n) > 1})]
    for pair, reason in INCOMPATIBLE.items():
        if pair <= set(names):
            first, second = sorted(pair)
            problems.append(f"token_credit combines {first!r} and {second!r}: {reason}")
    if "tr_grpo" in names and ar_alpha > 0:
        problems.append(
            f"token_credit 'tr_grpo' with ar_alpha={ar_alpha}: both shape the weight by probability (TR-GRPO "
            "generalises AR's linear weight); set ar_alpha=0 or drop tr_grpo"
        )
    for name, given in constants.items():
        key = f"token_credit_kwargs.{name}"
        if name not in names:
            problems.append(f"{key}: {name!r} is not in token_credit {list(names)}")
        elif name in PRESETS:
            problems += _constant_problems(key, PRESETS[name], given)
    return problems


def _constant_problems(key: str, factory: Callable[..., CreditStep], given: Any) -> list[str]:
    if not isinstance(given, Mapping):
        return [f"{key} must map constant names to values, got {given!r}"]
    accepted = inspect.signature(factory).parameters
    unknown = [k for k in given if k not in accepted]
    if unknown:
        return [f"{key}: unknown constant(s) {', '.join(map(repr, unknown))}; it takes {', '.join(accepted)}"]
    wrong_type = [f"{k}={v!r}" for k, v in given.items() if isinstance(v, str) or not isinstance(v, (int, float))]
    if wrong_type:
        return [f"{key}: constants must be numbers or true/false, got {', '.join(wrong_type)}"]
    try:
        factory(**given)
    except ValueError as error:
        return [f"{key}: {error}"]
    return []


def named_credit_steps(steps: CreditStep | list[CreditStep] | Mapping[str, CreditStep] | None) -> dict[str, CreditStep]:
    """Return user credit steps by name: a mapping as given, callables by their __name__."""
    if steps is None:
        return {}
    if isinstance(steps, Mapping):
        return dict(steps)
    named = {}
    for step in steps if isinstance(steps, (list, tuple)) else [steps]:
        if not callable(step):
            raise ValueError(f"token_credit: expected a callable credit step, got {step!r}")
        name = getattr(step, "__name__", type(step).__name__)
        if name in named:
            raise ValueError(f"token_credit: two credit steps named {name!r}; pass a dict to name them")
        named[name] = step
    return named
