"""The one-update probe of PAPER.md §9: how each probability bucket drives and receives one policy update.

From one batch of rollouts it measures, with every other setting fixed:
- token share per π_old bucket;
- the gradient norm of the loss restricted to each bucket, and to all tokens;
- Δπ per token after one optimizer step that updates all tokens, one bucket only, or uses GRPO, AR,
  Lopti (two phases) or AR + Lopti — by bucket and advantage sign — and the "correct ratio" (share of
  positive-advantage tokens whose probability rose; the mirror for negative ones);
- Proposition 4.2 per token: ‖∂(−log π)/∂z‖ at the logits and ‖∂(−log π)/∂h‖ at the last hidden state
  (the unembedding's input) against their bounds in (1 − π).
The loss is the training objective (lopti.core.objective, without KL), token-mean over the whole batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from lopti.core.advantages import token_advantages
from lopti.core.bound import grad_norm_bounds, logit_grad_norm
from lopti.core.buckets import QUARTILES, bucket_labels, bucket_shares, check_edges, probability_buckets
from lopti.core.objective import token_objective
from lopti.diagnostics.rollouts import Rollouts

OPTIMIZERS = ("sgd", "adamw")
# Each compared method as (AR on, Lopti on): AR uses the config's alpha, Lopti takes one step per phase.
METHODS = {"grpo": (False, False), "ar": (True, False), "lopti": (False, True), "ar+lopti": (True, True)}
SCATTER_POINTS = 4000  # tokens kept for the gradient-vs-π figure


@dataclass
class ProbeConfig:
    """How the probe updates: the paper's analysis uses SGD with lr 1e-3 and probability quartiles."""

    edges: tuple[float, ...] = field(
        default=QUARTILES, metadata={"help": "Edges of the π_old buckets, from 0 to 1 (the paper: quartiles)."}
    )
    optimizer: str = field(default="sgd", metadata={"help": "Optimizer of the one update: sgd or adamw."})
    lr: float = field(default=1e-3, metadata={"help": "Learning rate of the one update."})
    alpha: float = field(default=0.3, metadata={"help": "AR's α for the ar and ar+lopti methods."})
    eta: float = field(default=0.5, metadata={"help": "Lopti's probability threshold η."})
    eps_low: float = field(default=0.2, metadata={"help": "Lower clip range ε of the surrogate."})
    eps_high: float = field(default=0.24, metadata={"help": "Upper clip range ε_high of the surrogate."})
    dual_clip: float = field(default=10.0, metadata={"help": "Dual-clip constant c for negative advantages."})
    micro_batch: int = field(default=4, metadata={"help": "Responses per forward/backward pass."})
    methods: tuple[str, ...] = field(
        default=tuple(METHODS), metadata={"help": f"Methods whose update is compared: any of {', '.join(METHODS)}."}
    )
    # One small step moves a confident token's log π by ~1e-9. The log-softmax is always taken in float64;
    # float64 weights also remove the float32 rounding of the logits themselves (~2× slower on a CPU).
    dtype: str = field(default="float64", metadata={"help": "Weights' dtype: float64 (exact) or float32 (faster)."})

    def check(self) -> None:
        """Raise a ValueError naming the first bad setting."""
        self.edges = check_edges(self.edges)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.lr <= 0 or self.micro_batch < 1:
            raise ValueError(f"lr and micro_batch must be positive, got {self.lr} and {self.micro_batch}")


@dataclass
class Batch:
    """Prompt + response ids, right-padded; `mask` marks the predicted response tokens (shifted by one)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor


def make_batch(rollouts: Rollouts, pad_id: int) -> Batch:
    """Return the rollouts as one right-padded batch."""
    sequences = [p + c for p, c in zip(rollouts.prompt_ids, rollouts.completion_ids, strict=True)]
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    response = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, (prompt, sequence) in enumerate(zip(rollouts.prompt_ids, sequences, strict=True)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        response[row, len(prompt) : len(sequence)] = True
    return Batch(input_ids, attention, input_ids[:, 1:], response[:, 1:])


def _micro(batch: Batch, size: int):
    for start in range(0, batch.input_ids.shape[0], size):
        yield slice(start, start + size)


def _logits(model, batch: Batch, rows: slice, temperature: float) -> torch.Tensor:
    out = model(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows])
    return out.logits[:, :-1].double() / temperature  # a float32 log-softmax would drown small moves


def token_logprobs(model, batch: Batch, temperature: float, micro_batch: int) -> torch.Tensor:
    """Return log π of every target token (B, L − 1) at the rollout temperature, without gradients."""
    parts = []
    with torch.no_grad():
        for rows in _micro(batch, micro_batch):
            logits = _logits(model, batch, rows, temperature)
            parts.append(torch.log_softmax(logits, -1).gather(-1, batch.targets[rows].unsqueeze(-1)).squeeze(-1))
    return torch.cat(parts)


@dataclass(frozen=True)
class Update:
    """One compared update: the advantages it starts from, its AR α (0 = off) and whether Lopti splits it."""

    advantages: torch.Tensor
    alpha: float = 0.0
    lopti: bool = False


def policy_gradient(
    model, batch: Batch, old: torch.Tensor, update: Update, phase: int | None, temperature: float, config
) -> float:
    """Accumulate the gradient of the token-mean objective (lopti.core, no KL) into .grad; return its norm."""
    model.zero_grad(set_to_none=True)
    count = batch.mask.sum()
    for rows in _micro(batch, config.micro_batch):
        logits = _logits(model, batch, rows, temperature)
        logp = torch.log_softmax(logits, -1).gather(-1, batch.targets[rows].unsqueeze(-1)).squeeze(-1)
        terms = token_objective(
            logp, old[rows], update.advantages[rows], batch.mask[rows],
            alpha=update.alpha, phase=phase, eta=config.eta,
            eps_low=config.eps_low, eps_high=config.eps_high, dual_clip=config.dual_clip,
        )  # fmt: skip
        (terms.policy.sum() / count).backward()
    squares = [p.grad.double().square().sum() for p in model.parameters() if p.grad is not None]
    return math.sqrt(sum(squares)) if squares else 0.0


def updated_logprobs(model, state, batch, old, update: Update, temperature, config) -> tuple[torch.Tensor, list[float]]:
    """Restore `state`, take one optimizer step (one per Lopti phase); return the new log π and gradient norms."""
    model.load_state_dict(state)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (
        torch.optim.SGD(params, lr=config.lr)
        if config.optimizer == "sgd"
        else torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    )
    norms = []
    for phase in (0, 1) if update.lopti else (None,):
        norms.append(policy_gradient(model, batch, old, update, phase, temperature, config))
        optimizer.step()
    return token_logprobs(model, batch, temperature, config.micro_batch), norms


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
    table = {}
    for k, label in enumerate([*labels, "all"]):
        inside = index >= 0 if label == "all" else index == k
        positive, negative = inside & (advantages > 0), inside & (advantages < 0)
        up, down = (delta[positive] > 0).sum().item(), (delta[negative] < 0).sum().item()
        n_pos, n_neg = positive.sum().item(), negative.sum().item()
        table[label] = {
            "positive": _summary(delta[positive]),
            "negative": _summary(delta[negative]),
            "correct_ratio": {
                "positive": up / n_pos if n_pos else None,
                "negative": down / n_neg if n_neg else None,
                "both": (up + down) / (n_pos + n_neg) if n_pos + n_neg else None,
            },
        }
    return table


def _correlation(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Return Pearson's r, or None when either side is constant (r is undefined there, not NaN in JSON)."""
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return torch.corrcoef(torch.stack([x.double(), y.double()]))[0, 1].item()


def gradient_bounds(
    model, batch: Batch, temperature: float, micro_batch: int, seed: int = 0
) -> tuple[dict[str, Any], torch.Tensor]:
    """Return Proposition 4.2 checks at the logits and the last hidden state, and each token's logit norm.

    At the logits the bounds are exact. At the hidden state h (z = W h / T) the gradient is Wᵀ(π − e_k)/T;
    its norm is at most σ_max(W)/T · √2 (1 − π), always, and at least σ_min(W)/T · √(N/(N−1)) (1 − π) only
    if π − e_k has no part in Wᵀ's null space (it does, since N > d): the lower bound is not guaranteed.
    """
    weight = model.get_output_embeddings().weight.detach().double()
    singular = torch.linalg.svdvals(weight) / temperature
    sigma_min, sigma_max = singular.min().item(), singular.max().item()
    vocab = weight.shape[0]
    pis, logit_norms, hidden_norms = [], [], []
    with torch.no_grad():
        for rows in _micro(batch, micro_batch):
            logits = _logits(model, batch, rows, temperature)
            mask, targets = batch.mask[rows], batch.targets[rows]
            norm, one_minus_pi = logit_grad_norm(logits[mask], targets[mask])
            grad_z = torch.softmax(logits[mask].double(), -1)
            grad_z[torch.arange(len(grad_z)), targets[mask]] -= 1.0
            hidden_norms.append((grad_z @ weight).norm(dim=-1) / temperature)
            logit_norms.append(norm)
            pis.append(1.0 - one_minus_pi)
    pi, logit_norm, hidden_norm = torch.cat(pis), torch.cat(logit_norms), torch.cat(hidden_norms)
    lower, upper = grad_norm_bounds(1.0 - pi, vocab)
    slack = 1e-9 * torch.ones_like(pi)  # float64 rounding at π → 1, where both sides vanish
    inside_logits = (logit_norm >= lower - slack) & (logit_norm <= upper + slack)
    hidden_upper = hidden_norm <= sigma_max * upper + slack
    hidden_lower = hidden_norm >= sigma_min * lower - slack
    keep = torch.randperm(len(pi), generator=torch.Generator().manual_seed(seed))[:SCATTER_POINTS]
    return {
        "tokens": len(pi),
        "vocab_size": vocab,
        "logits": {"inside_fraction": inside_logits.double().mean().item()},
        "hidden": {
            "sigma_min": sigma_min,
            "sigma_max": sigma_max,
            "upper_holds_fraction": hidden_upper.double().mean().item(),
            "lower_holds_fraction": hidden_lower.double().mean().item(),
            "correlation_with_1_minus_pi": _correlation(hidden_norm, 1 - pi),
        },
        "scatter": {
            "pi": pi[keep].tolist(),
            "logit_norm": logit_norm[keep].tolist(),
            "hidden_norm": hidden_norm[keep].tolist(),
        },
    }, logit_norm


def run_probe(model, rollouts: Rollouts, pad_id: int, config: ProbeConfig | None = None) -> dict[str, Any]:
    """Return every measurement of the probe as a JSON-ready dict (see the module docstring)."""
    config = config or ProbeConfig()
    config.check()
    model.to(getattr(torch, config.dtype))  # the model is left in this dtype
    model.eval()  # no dropout: the measured change is the update's alone
    batch, temperature = make_batch(rollouts, pad_id), rollouts.temperature
    old = token_logprobs(model, batch, temperature, config.micro_batch)
    rewards = torch.tensor(rollouts.rewards, dtype=old.dtype)
    advantages = token_advantages(rewards, batch.mask, rollouts.group_size, "grpo")
    index = probability_buckets(old, batch.mask, config.edges)
    labels = bucket_labels(config.edges)
    shares = bucket_shares(index, len(labels))
    bound, logit_norm = gradient_bounds(model, batch, temperature, config.micro_batch)
    warnings = [f"bucket {label} holds no response token" for label, s in zip(labels, shares, strict=True) if s == 0]
    result: dict[str, Any] = {
        "config": {**config.__dict__, "edges": list(config.edges), "methods": list(config.methods)},
        "responses": len(rollouts),
        "group_size": rollouts.group_size,
        "temperature": temperature,
        "tokens": int(batch.mask.sum()),
        "reward_mean": rewards.mean().item(),
        "groups_with_reward_spread": sum(
            len(set(rollouts.rewards[i : i + rollouts.group_size])) > 1
            for i in range(0, len(rollouts), rollouts.group_size)
        ),
        "buckets": labels,
        "token_share": dict(zip(labels, shares.tolist(), strict=True)),
        "bound": bound,
        "warnings": warnings,
    }
    # Each bucket's share of Σ|Â|·‖∂(−log π)/∂z‖: exact, and as the trainer logs it with (1 − π) for the norm.
    for key, norm in (("grad_share_exact", logit_norm), ("grad_share_1_minus_pi", 1 - old[batch.mask].double().exp())):
        shares = bucket_shares(index[batch.mask], len(labels), advantages[batch.mask].abs().double() * norm)
        result[key] = dict(zip(labels, shares.tolist(), strict=True))
    if not advantages.abs().sum() > 0:
        result["warnings"].append(
            "every group gave all its responses the same reward: all advantages are zero, so no update moves "
            "any token; gradient norms, Δπ and correct ratios are not measured"
        )
        result.update(grad_norm=None, delta_pi=None)
        return result
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    variants = {f"only {label}": Update(advantages * (index == k)) for k, label in enumerate(labels)}
    for method in config.methods:
        uses_ar, uses_lopti = METHODS[method]
        variants[method] = Update(advantages, config.alpha if uses_ar else 0.0, uses_lopti)
    grad_norm, delta_pi = {}, {}
    for name, update in tqdm(variants.items(), desc="probe updates", leave=False):
        new, norms = updated_logprobs(model, state, batch, old, update, temperature, config)
        grad_norm[name] = norms[0] if len(norms) == 1 else norms
        delta = (new.double().exp() - old.double().exp())[batch.mask]
        delta_pi[name] = delta_breakdown(delta, index[batch.mask], advantages[batch.mask], labels)
    model.load_state_dict(state)
    result.update(grad_norm=grad_norm, delta_pi=delta_pi)
    return result
