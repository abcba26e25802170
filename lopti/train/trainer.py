"""`LoptiGRPOTrainer`: TRL's GRPOTrainer with Advantage Reweighting and Lopti (docs/paper.md §4–§5).

TRL keeps everything it does well (generation, vLLM, rewards, distribution, logging); lopti changes
three private methods, each marked below and guarded by tests/train/test_trl_contract.py:
- `_calculate_rewards`: remembers the rewards, for lopti's advantage estimators;
- `_generate_and_score_completions`: swaps in per-token advantages from `lopti.core` when asked;
- `_compute_loss`: the loss is `lopti.core.objective` (AR weights, the Lopti phase mask, the clipped
  surrogate with optional dual clip, KL and entropy masked to the phase's tokens); the method keeps
  only TRL's plumbing: log-probs, the `loss_type` aggregation, vLLM importance ratios, logging.
Two more only observe, for the metrics: `_get_per_token_logps_and_entropies` also keeps log Σ p² from
the fused LM head (the exact gradient share), and `training_step` hands each micro-batch to the
update-quality measurement (lopti/train/update_quality.py) when `update_quality_every` asks for it.
On the CPU, `PackedForwards` (lopti/train/packing.py) runs the rollout's prefill and the log-prob forwards
with each prompt once per group: the same numbers up to float rounding, in less time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from lopti.core import (
    CreditStep,
    aggregate_loss,
    lopti_phase,
    low_prob_mask,
    make_credit_steps,
    split_seed,
    token_advantages,
    token_objective,
)
from lopti.core.bound import logit_grad_norm_from_sum_sq
from lopti.core.buckets import bucket_labels, bucket_totals, probability_buckets
from lopti.core.objective import BUILT_IN_STEPS, credit_shares
from lopti.train.config import LoptiGRPOConfig
from lopti.train.guards import TrainingGuard
from lopti.train.packing import PackedForwards
from lopti.train.update_quality import UpdateQuality

AGGREGATION_OF_LOSS_TYPE = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
}


def _reward_name(func: Any) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


def _is_python_reward(func: Any) -> bool:
    """Return True for a plain callable reward (not a reward-model name or module)."""
    return callable(func) and not isinstance(func, (str, torch.nn.Module))


def explain_reward_errors(
    func: Callable[..., list[float]], check: Callable[[str, list, list], list] | None = None
) -> Callable[..., list[float]]:
    """Return `func` wrapped so that an exception names the function and the first failing sample, and its
    values pass through `check(name, values, completions)` (the trainer's guard against nan and inf)."""

    @functools.wraps(func)
    def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float]:
        try:
            values = func(prompts=prompts, completions=completions, **kwargs)
        except Exception as error:
            for index in range(len(completions)):
                one = {
                    k: v[index : index + 1] if isinstance(v, list) and len(v) == len(completions) else v
                    for k, v in kwargs.items()
                }
                try:
                    func(prompts=prompts[index : index + 1], completions=completions[index : index + 1], **one)
                except Exception as sample_error:
                    raise RuntimeError(
                        f"reward function {_reward_name(func)!r} raised on sample {index} of the batch "
                        f"({type(sample_error).__name__}: {sample_error})"
                    ) from error
            raise RuntimeError(f"reward function {_reward_name(func)!r} raised on the batch: {error}") from error
        return check(_reward_name(func), values, completions) if check and isinstance(values, list) else values

    return wrapped


def _named_steps(steps: CreditStep | list[CreditStep] | Mapping[str, CreditStep] | None) -> dict[str, CreditStep]:
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


class LoptiGRPOTrainer(PackedForwards, GRPOTrainer):
    """GRPOTrainer whose loss applies Advantage Reweighting and Low-Probability Token Isolation.

    Use it exactly like `trl.GRPOTrainer`, with a `LoptiGRPOConfig`. With `ar_alpha=0`, `lopti=False`,
    no `token_credit` and `advantage_estimator=None` it trains exactly like GRPOTrainer.

    `token_credit` adds your own per-token credit steps (`lopti.core.credit`): a callable
    `step(context) -> TokenCredit`, a list of them, or a {name: step} mapping; they run after AR, Lopti
    and the config's `token_credit` presets, and log under `credit/<name>_*`.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: LoptiGRPOConfig,
        token_credit: CreditStep | list[CreditStep] | Mapping[str, CreditStep] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, LoptiGRPOConfig):
            raise TypeError(f"LoptiGRPOTrainer needs args=LoptiGRPOConfig(...), got {type(args).__name__}")
        self._credit_steps = {**make_credit_steps(args.token_credit, args.token_credit_kwargs)}
        for name, step in _named_steps(token_credit).items():
            if name in self._credit_steps or name in BUILT_IN_STEPS:
                raise ValueError(f"token_credit: a credit step named {name!r} is already in use; pass a dict to rename")
            self._credit_steps[name] = step
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        self._guard = TrainingGuard(self)  # non-finite rewards and losses, divergence: lopti.train.guards
        funcs = [explain_reward_errors(f, self._guard.note_rewards) if _is_python_reward(f) else f for f in funcs]
        super().__init__(model=model, reward_funcs=funcs, args=args, **kwargs)
        self.add_callback(self._guard)
        self._rewards_per_func: torch.Tensor | None = None
        self._log_sum_sq_parts: list[torch.Tensor | None] | None = None  # filled while a log-prob pass runs
        self._log_sum_sq_probs: torch.Tensor | None = None  # of the latest log-prob pass, None if unavailable
        self._training_logps: torch.Tensor | None = None  # of the latest pass with gradients (the loss's)
        self._skip_old_forward = self._old_from_first_pass = False  # CPU fast path: see _generate_and_score_...
        self._keep_log_sum_sq_probs()
        self._update_quality = UpdateQuality(self) if args.update_quality_every > 0 else None
        if self._update_quality is not None:
            self.add_callback(self._update_quality)

    def _keep_log_sum_sq_probs(self) -> None:
        """Make the policy's fused LM head also return log Σ p², and keep it for `_log_probability_metrics`.

        TRL patches the forward to return log-probs and entropy only; patching it again adds log Σ p², which
        the kernel accumulates in the same pass over the vocabulary. TRL's `_get_per_token_logps_and_entropies`
        passes on only log-probs and entropy, so a thin wrapper collects log Σ p² while that method runs.
        """
        model = self.model.get_base_model() if is_peft_model(self.model) else self.model
        add_fused_lm_head(
            model,
            temperature=self.temperature,
            cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32,
            outputs=("log_probs", "entropy", "log_sum_sq_probs"),
        )
        fused_forward = model.forward

        @functools.wraps(fused_forward)
        def forward(*args: Any, **kwargs: Any) -> Any:
            outputs = fused_forward(*args, **kwargs)
            if kwargs.get("fused_lm_head") and self._log_sum_sq_parts is not None:
                self._log_sum_sq_parts.append(outputs.log_sum_sq_probs)
            return outputs

        model.forward = forward

    # --- TRL's log-prob pass, packed on the CPU (lopti/train/packing.py); keeps log Σ p² of the same tokens,
    # and the loss pass's log-probs.
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if self._skip_old_forward and not torch.is_grad_enabled():  # TRL's first no-gradient call: the old log-probs
            self._skip_old_forward = False
            return None, None, None
        packed = self._packed_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if packed is not None:
            logps, entropies, self._log_sum_sq_probs = packed
            aux_loss = None
        else:
            self._log_sum_sq_parts = []
            logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            parts, self._log_sum_sq_parts = self._log_sum_sq_parts, None
            # the reference model has no wrapper: nothing is collected, and the (1 − π) bound is the fallback
            complete = bool(parts) and all(p is not None for p in parts) and sum(len(p) for p in parts) == len(logps)
            self._log_sum_sq_probs = torch.cat([p[:, -logits_to_keep:] for p in parts]) if complete else None
        if logps.requires_grad:
            self._training_logps = logps.detach()
        return logps, entropies, aux_loss

    # --- Observes each micro-step for the update-quality metrics; TRL's step itself is unchanged.
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._update_quality is not None:
            micro_batch = self._buffered_inputs[(self._step - 1) % self.args.steps_per_generation]
            self._update_quality.after_micro_step(micro_batch, self._training_logps)
        return loss

    # --- TRL override 1: keep the rewards, which GRPOTrainer only turns into advantages internally.
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    # --- TRL override 2: swap TRL's (B,) advantages for lopti.core's per-token ones if an estimator is set.
    # With the CPU fast path, TRL's old log-prob forward may be left out (`_skips_old_forward`): the first pass's
    # log-probs then become the batch's old ones in `_compute_loss`.
    def _generate_and_score_completions(self, inputs):
        self._skip_old_forward = self._old_from_first_pass = self._skips_old_forward()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._skip_old_forward = False
        if self.args.advantage_estimator is not None and self.model.training:
            output["advantages"] = self._lopti_advantages(output["completion_mask"])
        return output

    def _lopti_advantages(self, local_mask: torch.Tensor) -> torch.Tensor:
        """Return (B_local, T) advantages computed over the global batch, as TRL does for its own."""
        rewards_per_func = self._rewards_per_func
        weights = self.reward_weights.to(rewards_per_func.device)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = torch.nan_to_num(rewards_per_func * weights).sum(dim=1)
        lengths = self.accelerator.gather(local_mask.sum(dim=1))
        global_mask = torch.arange(int(lengths.max()), device=lengths.device)[None, :] < lengths[:, None]
        advantages = token_advantages(rewards, global_mask, self.num_generations, self.args.advantage_estimator)
        per_response = advantages[:, 0].masked_fill(unscorable, 0.0)  # outcome advantages: one per response
        start = self.accelerator.process_index * local_mask.size(0)
        local = per_response[start : start + local_mask.size(0)].to(local_mask.device)
        return local[:, None] * local_mask.to(local.dtype)

    def lopti_phase(self) -> int:
        """Return the Lopti phase (0 or 1) of the current micro-step, from TRL's micro-step counter."""
        cycle_step = self._step % (self.args.steps_per_generation * self.num_iterations)
        return lopti_phase(cycle_step, self.args.steps_per_generation)

    def lopti_split_seed(self) -> int:
        """Return the seed of the current micro-batch's random split (`lopti_split='random'`): from the trainer
        seed, the RL step, the micro-batch's slot in the generated batch and the process, so both passes over
        a micro-batch draw the same split. The RL step comes from the optimizer steps, which a resumed run
        restores (TRL's micro-step counter restarts at 0); LoptiGRPOConfig makes a batch whole optimizer steps."""
        per_batch = self.args.steps_per_generation * self.num_iterations // self.args.gradient_accumulation_steps
        rl_step = self.state.global_step // per_batch
        slot = self._step % self.args.steps_per_generation
        return split_seed(self.args.seed, rl_step, slot, self.accelerator.process_index)

    # --- TRL override 3: the loss is lopti.core's objective; what stays here is TRL's plumbing.
    def _compute_loss(self, model, inputs):
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        # On-policy (one pass, aligned steps) TRL skips the old log-probs: they equal the current ones.
        old_logps = inputs.get("old_per_token_logps")
        if old_logps is None:
            old_logps = logps.detach()
            if self._old_from_first_pass:  # the buffered micro-batch keeps them for the later passes
                inputs["old_per_token_logps"] = old_logps
        advantages = inputs["advantages"]
        advantages = advantages[:, None].expand_as(logps) if advantages.dim() == 1 else advantages
        phase = self.lopti_phase() if self.args.lopti else None
        terms = token_objective(
            logps,
            old_logps,
            advantages,
            mask,
            alpha=self.args.ar_alpha,
            phase=phase,
            eta=self.args.lopti_eta,
            order=self.args.lopti_order,
            split=self.args.lopti_split,
            split_seed=self.lopti_split_seed() if phase is not None and self.args.lopti_split == "random" else None,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            dual_clip=self.args.dual_clip,
            ref_logprobs=inputs["ref_per_token_logps"] if self.beta != 0.0 else None,
            kl_estimator=self.args.kl_estimator,
            entropies=entropies,
            entropy_bonus=self.args.entropy_coef != 0.0,
            credit=self._credit_steps,
        )

        per_token = terms.policy
        # TRL's correction for vLLM sampling with other numerics than training; the paper has none, so
        # the paper's recipes turn it off (docs/trainer.md).
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token = per_token * inputs["importance_sampling_ratio"]
        kl = terms.kl
        if kl is not None:
            if self.args.use_bias_correction_kl:  # TRL's option; LoptiGRPOConfig defaults it to the paper's off
                kl = kl * torch.exp(logps - old_logps)
            per_token = per_token + self.beta * kl
        # Tokens a credit step dropped (STAPO) leave the denominators too; a micro-batch that lost every
        # token has an all-zero loss, which the response mask normalises without dividing by zero.
        counted = terms.counted
        if any(credit.drop is not None for credit in terms.credit.values()) and not counted.any():
            counted = mask
        loss = self._aggregate(per_token, counted, inputs)
        if terms.entropy is not None:
            loss = loss - self.args.entropy_coef * terms.entropy / self._accumulation()
        loss = self._guard_nonfinite(loss, logps)
        self._log_step_metrics(logps, old_logps, entropies, mask, terms, loss, phase, kl)
        self._log_probability_metrics(logps, old_logps, mask, terms.active, terms.reweighted, phase)
        return loss

    def _accumulation(self) -> float:
        return self.current_gradient_accumulation_steps if self.model.training else 1.0

    def _aggregate(self, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict) -> torch.Tensor:
        """Return the loss normalised exactly as TRL normalises its `loss_type`."""
        mode = AGGREGATION_OF_LOSS_TYPE[self.loss_type]
        if self.loss_type == "dapo":
            num_tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if self.model.training:
                num_tokens = num_tokens * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return aggregate_loss(per_token, mask, mode, num_tokens=num_tokens)
        loss = aggregate_loss(per_token, mask, mode, max_length=self.max_completion_length)
        return loss / self._accumulation()

    def _guard_nonfinite(self, loss: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
        """Return the loss, or a zero one when it is not finite; `TrainingGuard` then drops the optimizer step's
        update (a zero loss alone would still let Adam's momentum move the weights) and counts it."""
        if self._guard.note_loss(loss):
            return loss
        return torch.zeros((), device=logps.device, requires_grad=True)  # no gradient reaches the model

    def _log_step_metrics(self, logps, old_logps, entropies, mask, terms, loss, phase, kl):
        mode = "train" if self.model.training else "eval"
        valid = mask.bool()

        def mean_of(values: torch.Tensor, where: torch.Tensor = valid) -> float:
            return self._gathered_mean(values, where)

        metrics = self._metrics[mode]
        metrics["entropy"].append(mean_of(entropies))
        metrics["lopti/low_prob_token_share"].append(
            mean_of(low_prob_mask(old_logps, mask, self.args.lopti_eta).float())
        )
        if self.args.ar_alpha > 0:
            metrics["ar/weight_mean"].append(mean_of(terms.credit["ar"].weights))
        for key, values in credit_shares(terms.credit, valid).items():
            metrics[f"credit/{key}"].append(mean_of(values))
        for name, value in terms.metrics.items():
            metrics[f"clip/{name}"].append(self.accelerator.gather(value.detach()).nanmean().item())
        if kl is not None:
            metrics["kl"].append(mean_of(kl, terms.active))
        name = f"lopti/phase{phase + 1}_loss" if self.args.lopti else "policy_loss"
        metrics[name].append(self.accelerator.gather(loss.detach()).nanmean().item())

    def _log_probability_metrics(self, logps, old_logps, mask, active, advantages, phase) -> None:
        """Log each π_old bucket's share of the tokens and of the gradient, also per advantage sign, and Lopti's moves.

        probs/grad_share_*: each bucket's share of Σ |Â|·‖∂(−log π)/∂z‖, the advantage-weighted logit-gradient
        norm at the current policy: exact, √(1 − 2π + Σ p²), from the log Σ p² that the fused LM head returned
        with these log-probs; where that is unavailable, the bound (1 − π), exact up to a factor in
        [√(N/(N−1)), √2] (Proposition 4.2). No extra backward either way. probs/pos_share_*, probs/pos_grad_share_*
        and probs/neg_* are the same over the tokens with Â > 0 and with Â < 0 alone. With Lopti, phase 2 logs
        the mean |log π − log π_old| of the phase-1 and the phase-2 tokens: what phase 1 moved.
        """
        metrics = self._metrics["train" if self.model.training else "eval"]
        edges = self.args.probability_buckets
        labels = bucket_labels(edges)
        index = probability_buckets(old_logps, mask, edges)
        sum_sq = self._log_sum_sq_probs
        if sum_sq is not None and sum_sq.shape == logps.shape:
            norm = logit_grad_norm_from_sum_sq(logps, sum_sq)
        else:
            norm = -torch.expm1(logps.detach().double())
        weight = advantages.abs() * norm
        signs = {"": mask.bool(), "pos_": advantages > 0, "neg_": advantages < 0}
        totals = [
            bucket_totals(index.masked_fill(~where, -1), len(labels), values)
            for where in signs.values()
            for values in (None, weight)
        ]
        totals = self.accelerator.gather(torch.stack(totals).unsqueeze(0)).sum(dim=0)
        for sign, tokens, gradient in zip(signs, totals[0::2], totals[1::2], strict=True):
            token_share, gradient_share = tokens / tokens.sum().clamp(min=1), gradient / gradient.sum().clamp(min=1e-30)
            for k, label in enumerate(labels):
                metrics[f"probs/{sign}share_{label}"].append(token_share[k].item())
                metrics[f"probs/{sign}grad_share_{label}"].append(gradient_share[k].item())
        if self.args.lopti and phase == 1 and self.args.lopti_split != "none":  # "none": no phase-1-only tokens
            moved = (logps.detach() - old_logps).abs()
            for name, where in (("phase1_tokens", mask.bool() & ~active), ("phase2_tokens", active)):
                metrics[f"lopti/dlogp_{name}"].append(self._gathered_mean(moved, where))

    def _gathered_mean(self, values: torch.Tensor, where: torch.Tensor) -> float:
        """Return the mean of `values` over `where`, across all processes."""
        total = torch.stack([(values * where).sum(), where.sum().to(values.dtype)]).detach()
        total = self.accelerator.gather(total).view(-1, 2).sum(dim=0)
        return (total[0] / total[1].clamp(min=1)).item()
