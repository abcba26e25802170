"""The one-update probe of docs/paper.md §9: how each probability bucket drives and receives one policy update.

From one or more independent batches of rollouts it measures, with every other setting fixed:
- token share per π_old bucket, overall and per advantage sign;
- the gradient norm of the loss restricted to each bucket, and to all tokens;
- Δπ per token after one update of all tokens, of one bucket only, or with any method of
  `lopti.core.methods` (GRPO, AR, Lopti with one optimizer step per phase, AR + Lopti, the token-credit
  presets and their combinations), by bucket and advantage sign, and the "correct ratio" (share of
  positive-advantage tokens whose probability rose; the mirror for negative ones), with 95% intervals
  over the batches (lopti/diagnostics/pooling.py);
- for methods with credit presets, each preset's share of tokens kept, mean weight and share selected,
  the trainer's `credit/*` metrics (`lopti.core.objective.credit_shares`), over the first regime's steps;
- all of it under each optimizer regime: "sgd" (the paper's analysis), "adamw" (the trainer's AdamW from
  a fresh state, whose first step moves every weight by about its learning rate) and "adamw_warm" (the
  same AdamW after one RL update of the same method on each of `warmup_updates` other batches, so that
  its moment estimates are those of a run in progress);
- Proposition 4.2 per token: ‖∂(−log π)/∂z‖ at the logits and ‖∂(−log π)/∂h‖ at the last hidden state
  (the unembedding's input) against their bounds in (1 − π).
The loss is the training objective (lopti.core.objective, without KL or entropy bonus), token-mean over the
whole batch; tokens a preset drops leave the denominator, as in the trainer. A preset's batch-level
selections (entropy quantiles, top shares, covariances) see one micro-batch, as the trainer's see its own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import Trainer

from lopti.core.advantages import token_advantages
from lopti.core.bound import logit_grad_norm
from lopti.core.buckets import bucket_labels, probability_buckets
from lopti.core.credit import CreditStep
from lopti.core.credit_presets import make_credit_steps
from lopti.core.methods import parse_method
from lopti.core.objective import credit_shares, token_objective
from lopti.core.packing import pack_shared_prompts
from lopti.diagnostics.pooling import BatchMeasure, pool
from lopti.diagnostics.probe_config import ProbeConfig  # its own module; callers may import it from here
from lopti.diagnostics.rollouts import Rollouts


@dataclass
class Batch:
    """Left-padded prompts followed by right-padded responses (TRL's layout); `targets` (B, C) are the response
    tokens and `mask` marks the real ones."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor


def make_batch(rollouts: Rollouts, pad_id: int) -> Batch:
    """Return the rollouts as one batch of left-padded prompts and right-padded responses."""
    prompt_width = max(len(p) for p in rollouts.prompt_ids)
    width = max(1, max(len(c) for c in rollouts.completion_ids))
    rows = len(rollouts.prompt_ids)
    prompts = torch.full((rows, prompt_width), pad_id, dtype=torch.long)
    targets = torch.full((rows, width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompts)
    mask = torch.zeros_like(targets, dtype=torch.bool)
    for row, (prompt, response) in enumerate(zip(rollouts.prompt_ids, rollouts.completion_ids, strict=True)):
        prompts[row, prompt_width - len(prompt) :] = torch.tensor(prompt)
        prompt_mask[row, prompt_width - len(prompt) :] = 1
        targets[row, : len(response)] = torch.tensor(response, dtype=torch.long)
        mask[row, : len(response)] = True
    return Batch(torch.cat([prompts, targets], 1), torch.cat([prompt_mask, mask.long()], 1), targets, mask)


def _micro(batch: Batch, size: int):
    for start in range(0, batch.input_ids.shape[0], size):
        yield slice(start, start + size)


def _logits(model, batch: Batch, rows: slice, temperature: float, packed: bool) -> torch.Tensor:
    """Return the logits (rows, C, V) that predict each response token, in float64, divided by the temperature.

    Packed (`lopti.core.packing`) where the rows repeat a prompt and the model takes 4D masks (a 🤗 model with
    sdpa attention); otherwise one padded row each, with the position ids generation used.
    """
    ids, attention = batch.input_ids[rows], batch.attention_mask[rows]
    width = batch.targets.shape[1]
    sdpa = getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"
    # the packed rows' padding (id 0) is masked out and predicts nothing that is read
    layout = pack_shared_prompts(ids, attention, width, pad_token_id=0) if packed and sdpa else None
    if layout is None:
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -width - 1 : -1]
    else:
        out = model(input_ids=layout.input_ids, attention_mask=layout.attention_mask, position_ids=layout.position_ids)
        vocab = out.logits.shape[-1]
        picked = out.logits.reshape(-1, vocab).index_select(0, layout.sources)
        logits = picked.new_zeros(len(ids) * width, vocab).index_copy(0, layout.targets, picked)
        logits = logits.view(len(ids), width, vocab)
    return logits.double() / temperature  # a float32 log-softmax would drown small moves


def token_logprobs(model, batch: Batch, temperature: float, config: ProbeConfig) -> torch.Tensor:
    """Return log π of every target token (B, L − 1) at the rollout temperature, without gradients."""
    parts = []
    with torch.no_grad():
        for rows in _micro(batch, config.micro_batch):
            logits = _logits(model, batch, rows, temperature, config.packed)
            parts.append(torch.log_softmax(logits, -1).gather(-1, batch.targets[rows].unsqueeze(-1)).squeeze(-1))
    return torch.cat(parts)


def batch_advantages(rollouts: Rollouts, batch: Batch, dtype: torch.dtype) -> torch.Tensor:
    """Return the paper's GRPO advantages (B, L − 1) of the rollouts' rewards, zero outside the responses."""
    rewards = torch.tensor(rollouts.rewards, dtype=dtype)
    return token_advantages(rewards, batch.mask, rollouts.num_generations, "grpo")


@dataclass(frozen=True)
class Update:
    """One compared update: the advantages it starts from, its AR α (0 = off), whether Lopti splits it, and
    the further credit steps (presets) of its objective, by name."""

    advantages: torch.Tensor
    alpha: float = 0.0
    lopti: bool = False
    credit: Mapping[str, CreditStep] = field(default_factory=dict)


def method_update(method: str, advantages: torch.Tensor, config: ProbeConfig) -> Update:
    """Return the update of a method name (`lopti.core.methods`) on `advantages`: AR with the config's α (which
    `ProbeConfig.check` requires where a method has AR), and the presets built as the trainer builds its
    `token_credit`, with the paper's constants."""
    spec = parse_method(method)
    credit = make_credit_steps(spec.token_credit, spec.token_credit_kwargs)
    return Update(advantages, config.ar_alpha if spec.ar else 0.0, spec.lopti, credit)


def upper_clip(config: ProbeConfig) -> float:
    """Return the upper clip range: epsilon_high, or epsilon where it is None (TRL's rule)."""
    return config.epsilon if config.epsilon_high is None else config.epsilon_high


# Running sums behind the credit shares: metric key → [Σ value over response tokens, response tokens].
CreditTally = dict[str, list[float]]


def policy_gradient(
    model, batch: Batch, old: torch.Tensor, update: Update, phase: int | None, temperature: float, config,
    tally: CreditTally | None = None,
) -> float:  # fmt: skip
    """Accumulate the gradient of the token-mean objective (lopti.core, no KL) into .grad; return its norm.

    With `tally`, add each credit step's shares (`credit_shares`) of this pass to it.
    """
    model.zero_grad(set_to_none=True)
    count = batch.mask.sum()
    counted = 0  # tokens the denominator keeps: all response tokens but those a preset dropped
    for rows in _micro(batch, config.micro_batch):
        logits = _logits(model, batch, rows, temperature, config.packed)
        log_probs = torch.log_softmax(logits, -1)
        logp = log_probs.gather(-1, batch.targets[rows].unsqueeze(-1)).squeeze(-1)
        entropies = None
        if update.credit:  # the presets read entropies of the same forward, as the trainer's loss pass has them
            with torch.no_grad():
                entropies = -(log_probs.exp() * log_probs).sum(-1)
        mask = batch.mask[rows]
        terms = token_objective(
            logp, old[rows], update.advantages[rows], mask,
            alpha=update.alpha, phase=phase, eta=config.lopti_eta,
            eps_low=config.epsilon, eps_high=upper_clip(config), dual_clip=config.dual_clip,
            entropies=entropies, entropy_bonus=False, credit=update.credit,
        )  # fmt: skip
        (terms.policy.sum() / count).backward()
        counted += int(terms.counted.sum())
        for key, values in credit_shares(terms.credit, mask).items() if tally is not None else ():
            sums = tally.setdefault(key, [0.0, 0.0])
            sums[0] += (values.double() * mask).sum().item()
            sums[1] += mask.sum().item()
    if 0 < counted < count:  # renormalise over the kept tokens, as the trainer's denominators do
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(count.item() / counted)
    squares = [p.grad.double().square().sum() for p in model.parameters() if p.grad is not None]
    return sum(squares).sqrt().item() if squares else 0.0


def make_optimizer(model, regime: str, config: ProbeConfig, warm_state: dict | None = None) -> torch.optim.Optimizer:
    """Return the regime's optimizer over the trainable weights; AdamW as the 🤗 Trainer builds it.

    `warm_state` (an AdamW state_dict) is copied in, so that the same warm state can start many updates.
    """
    if regime == "sgd":
        return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    decayed = set(Trainer.get_decay_parameter_names(None, model))  # the Trainer's rule; the method needs no self
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for name, p in named if name in decayed], "weight_decay": config.weight_decay},
        {"params": [p for name, p in named if name not in decayed], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=config.adam_lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
    )
    if warm_state is not None:
        optimizer.load_state_dict(copy.deepcopy(warm_state))  # steps update the moments in place
    return optimizer


def take_update(
    model, optimizer, batch, old, update: Update, temperature: float, config, clip: bool, first: tuple | None = None,
    tally: CreditTally | None = None,
) -> tuple[list[float], tuple]:  # fmt: skip
    """Take one optimizer step per phase (two for Lopti), clipping like the trainer if asked.

    Return the gradient norms and `first`, the first step's (gradients, norm): that step starts from the same
    weights in every regime, so a caller passes it back to skip its backward pass. `tally` collects the credit
    shares of the steps computed here (not of a first step passed in).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    norms = []
    for step, phase in enumerate((0, 1) if update.lopti else (None,)):
        if step == 0 and first is not None:
            for p, gradient in zip(params, first[0], strict=True):
                p.grad = None if gradient is None else gradient.clone()  # clipping scales .grad in place
            norms.append(first[1])
        else:
            norms.append(policy_gradient(model, batch, old, update, phase, temperature, config, tally))
            if step == 0:
                first = ([None if p.grad is None else p.grad.clone() for p in params], norms[0])
        if clip and config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], config.max_grad_norm)
        optimizer.step()
    return norms, first


def warm_states(model, state: dict, warmup: list[Rollouts], pad_id: int, config: ProbeConfig) -> dict[str, dict]:
    """Return, per method (and GRPO), the AdamW state after that method's RL update on each warm-up batch.

    The weights move through the warm-up as in training, each batch's π_old taken at the current weights;
    then `state` is restored, so that every regime measures the same tokens from the same weights, and only
    the optimizer's moments and step count carry the warm-up.
    """
    states = {}
    for method in dict.fromkeys(("grpo", *config.methods)):  # GRPO's warms the bucket-only updates
        model.load_state_dict(state)
        optimizer = make_optimizer(model, "adamw", config)
        for rollouts in warmup:
            batch = make_batch(rollouts, pad_id)
            old = token_logprobs(model, batch, rollouts.temperature, config)
            update = method_update(method, batch_advantages(rollouts, batch, old.dtype), config)
            take_update(model, optimizer, batch, old, update, rollouts.temperature, config, clip=True)
        states[method] = copy.deepcopy(optimizer.state_dict())
    model.load_state_dict(state)
    return states


def token_gradient_norms(model, batch: Batch, temperature: float, config: ProbeConfig) -> tuple[torch.Tensor, ...]:
    """Return π, ‖∂(−log π)/∂z‖ and ‖∂(−log π)/∂h‖ of every response token (flattened, float64).

    At the last hidden state h (z = W h / T) the gradient is Wᵀ(π − e_k)/T.
    """
    weight = model.get_output_embeddings().weight.detach().double()
    pis, logit_norms, hidden_norms = [], [], []
    with torch.no_grad():
        for rows in _micro(batch, config.micro_batch):
            logits = _logits(model, batch, rows, temperature, config.packed)
            mask, targets = batch.mask[rows], batch.targets[rows]
            norm, one_minus_pi = logit_grad_norm(logits[mask], targets[mask])
            grad_z = torch.softmax(logits[mask].double(), -1)
            grad_z[torch.arange(len(grad_z)), targets[mask]] -= 1.0
            hidden_norms.append((grad_z @ weight).norm(dim=-1) / temperature)
            logit_norms.append(norm)
            pis.append(1.0 - one_minus_pi)
    return torch.cat(pis), torch.cat(logit_norms), torch.cat(hidden_norms)


def measure_batch(model, state, rollouts, pad_id, config: ProbeConfig, warm: dict[str, dict]) -> BatchMeasure:
    """Return one batch's per-token numbers and, under each regime, every compared update's Δπ per token."""
    batch, temperature = make_batch(rollouts, pad_id), rollouts.temperature
    model.load_state_dict(state)
    old = token_logprobs(model, batch, temperature, config)
    advantages = batch_advantages(rollouts, batch, old.dtype)
    index = probability_buckets(old, batch.mask, config.edges)
    pi, logit_norm, hidden_norm = token_gradient_norms(model, batch, temperature, config)
    mask = batch.mask
    measure = BatchMeasure(rollouts, index[mask], advantages[mask], pi, logit_norm, hidden_norm)
    if not advantages.abs().sum() > 0:
        return measure  # all rewards tied in every group: no update moves anything
    labels = bucket_labels(config.edges)
    variants = {f"only {label}": Update(advantages * (index == k)) for k, label in enumerate(labels)}
    variants |= {m: method_update(m, advantages, config) for m in config.methods}
    for name, update in variants.items():
        first = None  # the first step's gradient, shared by the regimes
        tally: CreditTally = {}  # filled under the first regime, the only one that computes every step
        # the bucket-only updates (the paper's Fig. 1) under the first regime only: they cost one step each
        for regime in config.optimizers[:1] if name.startswith("only ") else config.optimizers:
            model.load_state_dict(state)
            warm_state = warm.get("grpo" if name.startswith("only ") else name) if regime == "adamw_warm" else None
            optimizer = make_optimizer(model, regime, config, warm_state)
            norms, first = take_update(
                model, optimizer, batch, old, update, temperature, config, clip=regime != "sgd", first=first,
                tally=tally if regime == config.optimizers[0] else None,
            )  # fmt: skip
            new = token_logprobs(model, batch, temperature, config)
            measure.deltas[regime, name] = (new.exp() - old.exp())[mask]
            measure.grad_norms[regime, name] = norms
        if tally:
            measure.credit[name] = {key: total / tokens for key, (total, tokens) in tally.items()}
    return measure


def run_probe(
    model, rollouts: Rollouts | list[Rollouts], pad_id: int, config: ProbeConfig, warmup: list[Rollouts] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Return every measurement of the probe over one or more batches as a JSON-ready dict (module docstring).

    `config` is required: AR's α depends on the task, which the rollouts do not name (`lopti analyze` passes its
    task's). `warmup` holds the other batches whose RL updates warm the "adamw_warm" regime's AdamW state.
    """
    config.check()
    batches = [rollouts] if isinstance(rollouts, Rollouts) else list(rollouts)
    warmup = list(warmup or [])
    if "adamw_warm" in config.optimizers and not warmup:
        raise ValueError("optimizer adamw_warm needs warm-up batches: pass warmup rollouts (warmup_updates ≥ 1)")
    model.to(getattr(torch, config.dtype))  # the model is left in this dtype
    model.eval()  # no dropout: the measured change is the update's alone
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    warm = warm_states(model, state, warmup, pad_id, config) if "adamw_warm" in config.optimizers else {}
    measures = [measure_batch(model, state, b, pad_id, config, warm) for b in tqdm(batches, desc="probe", leave=False)]
    model.load_state_dict(state)
    weight = model.get_output_embeddings().weight.detach().double()
    result = pool(measures, bucket_labels(config.edges), weight, batches[0].temperature)
    config_record = {**config.__dict__, "edges": list(config.edges)}
    return {"config": config_record | {"optimizers": list(config.optimizers), "methods": list(config.methods)}} | result
