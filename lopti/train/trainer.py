"""`LoptiGRPOTrainer`: TRL's GRPOTrainer with Advantage Reweighting and Lopti (docs/paper.md §4–§5).

TRL keeps everything it does well (generation, vLLM, rewards, distribution, logging). lopti overrides five methods
of TRL's GRPOTrainer and one of transformers' Trainer, each marked below and guarded by
tests/train/test_trl_contract.py. Three change what TRL computes:
- `_calculate_rewards`: remembers the rewards, for lopti's advantage estimators;
- `_generate_and_score_completions`: swaps in per-token advantages from `lopti.core` when asked;
- `_compute_loss`: the loss is `lopti.core.objective` (AR weights, the Lopti phase mask, the clipped
  surrogate with optional dual clip, or CISPO's or SAPO's, KL and entropy masked to the phase's tokens); the method
  keeps only TRL's plumbing: log-probs (with TRL's image inputs), the `loss_type` aggregation, vLLM importance
  ratios, the MoE router loss, logging. With lopti's loss features off, a TRL loss option beyond the loss types
  grpo, bnpo, dr_grpo and dapo gets GRPOTrainer's own `_compute_loss` (`LoptiGRPOConfig.trl_computes_loss`).
Two only observe, for the metrics: `_get_per_token_logps_and_entropies` keeps log Σ p² from the fused LM
head (`LogSumSqCapture`: the exact gradient share) and the loss pass's log-probs, and `training_step` hands each
micro-batch to the update-quality measurement (lopti/train/update_quality.py) when `update_quality_every` asks.
Trainer's `_issue_warnings_after_load` leaves the tied weights out of a resume's "missing keys" warning.
Lopti's schedule (which pass over a generated batch is which phase) is `lopti_phase`, below.
This class runs TRL's own forwards on every device.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import get_config_model_id

from lopti.core import (
    CreditStep,
    NonFiniteError,
    aggregate_loss,
    cispo_policy_loss,
    lopti_phase,
    make_credit_steps,
    named_credit_steps,
    sapo_policy_loss,
    split_seed,
    token_advantages,
    token_objective,
)
from lopti.core.objective import BUILT_IN_STEPS, Surrogate
from lopti.errors import NumericalFailure
from lopti.train.config import LoptiGRPOConfig
from lopti.train.engines import check_engines
from lopti.train.guards import TrainingGuard, add_count, explain_reward_errors, is_python_reward
from lopti.train.log_sum_sq import LogSumSqCapture
from lopti.train.patched import refuse_patched
from lopti.train.reward_calls import bounded_reward
from lopti.train.step_metrics import StepMetrics
from lopti.train.update_quality import UpdateQuality

logger = logging.getLogger(__name__)

# The inputs besides the token ids that TRL's loss forward hands to the model (images and their layout, token
# types); `_compute_loss` and the update-quality forward pass each on as TRL's does (`extra_forward_inputs`).
# tests/train/test_trl_contract.py checks the list against the signature of TRL's `_get_per_token_logps_and_entropies`.
EXTRA_FORWARD_INPUTS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)  # fmt: skip

AGGREGATION_OF_LOSS_TYPE = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
    "luspo": "seq-mean-token-sum",
    "cispo": "token-mean",
    "sapo": "seq-mean-token-mean",
}
# Loss types that TRL normalises over the tokens of the whole accumulation window, not per micro-batch.
WINDOW_NORMALISED_LOSS_TYPES = ("dapo", "cispo")


def _loss_mask(inputs: dict) -> torch.Tensor:
    """Return the completion tokens the loss counts, as TRL counts them (tool outputs left out)."""
    mask = inputs["completion_mask"]
    return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]


def _old_logps_and_advantages(inputs: dict, logps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return π_old's log-probs and (B, T) advantages of a micro-batch whose loss pass gave `logps`.

    On-policy (one pass, aligned steps) TRL skips the old log-probs: they equal the current ones."""
    old_logps = inputs.get("old_per_token_logps")
    old_logps = logps.detach() if old_logps is None else old_logps
    advantages = inputs["advantages"]
    return old_logps, advantages[:, None].expand_as(logps) if advantages.dim() == 1 else advantages


def untied_missing_keys(model: torch.nn.Module, missing: list[str]) -> list[str]:
    """Return the keys of `missing` whose tensor is not also the tensor of a key that was loaded (a tied weight)."""
    tensors = model.state_dict(keep_vars=True)
    loaded = {tensors[name].data_ptr() for name in tensors if name not in missing}
    return [name for name in missing if name not in tensors or tensors[name].data_ptr() not in loaded]


class LoptiGRPOTrainer(StepMetrics, GRPOTrainer):
    """GRPOTrainer whose loss applies Advantage Reweighting and Low-Probability Token Isolation.

    Use it exactly like `trl.GRPOTrainer`, with a `LoptiGRPOConfig`. With `ar_alpha=0`, `lopti=False`,
    no `token_credit` and `advantage_estimator=None` it trains exactly like GRPOTrainer, whatever TRL loss options
    are set (docs/guides/trl.md).

    `token_credit` adds your own per-token credit steps (`lopti.core.credit`): a callable
    `step(context) -> TokenCredit`, a list of them, or a {name: step} mapping; they run after AR, Lopti
    and the config's `token_credit` presets, and log under `credit/<name>_*`.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: LoptiGRPOConfig | None = None,
        token_credit: CreditStep | list[CreditStep] | Mapping[str, CreditStep] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:  # TRL's default config, named as TRL names it, with lopti's defaults (all features off)
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = LoptiGRPOConfig(f"{model_name.split('/')[-1]}-LoptiGRPO")
        refuse_patched(GRPOTrainer)  # another library's GRPOTrainer methods would bypass lopti's loss
        if not isinstance(args, LoptiGRPOConfig):
            raise TypeError(f"LoptiGRPOTrainer needs args=LoptiGRPOConfig(...), got {type(args).__name__}")
        self._credit_steps = {**make_credit_steps(args.token_credit, args.token_credit_kwargs)}
        for name, step in named_credit_steps(token_credit).items():
            if name in self._credit_steps or name in BUILT_IN_STEPS:
                raise ValueError(f"token_credit: a credit step named {name!r} is already in use; pass a dict to rename")
            self._credit_steps[name] = step
        problems = args.trl_option_problems(credit_steps=bool(token_credit))
        if problems:
            raise ValueError("LoptiGRPOTrainer(token_credit=...): " + "; ".join(problems))
        self._trl_loss = args.trl_computes_loss(credit_steps=bool(self._credit_steps))
        self._lopti_loss = bool(args.lopti_loss_features(credit_steps=bool(self._credit_steps)))
        self._surrogate = self._make_surrogate(args)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        self._guard = TrainingGuard(self)  # non-finite rewards and losses, divergence: lopti.train.guards

        def guarded(func: Any) -> Any:  # raises and hangs (lopti.train.reward_calls) inside, nan and inf outside
            bounded = bounded_reward(func, args.reward_errors, args.reward_timeout, self._count_reward_errors)
            return explain_reward_errors(bounded, self._guard.note_rewards)

        funcs = [guarded(f) if is_python_reward(f) else f for f in funcs]
        super().__init__(model=model, reward_funcs=list(funcs), args=args, **kwargs)  # a copy: TRL appends to it
        # TRL appends a `get_reward` reward per environment class (environment_factory), named after it: guard it too
        for index in range(len(funcs), len(self.reward_funcs)):
            self.reward_funcs[index].__name__ = self.reward_func_names[index]
            self.reward_funcs[index] = guarded(self.reward_funcs[index])
        check_engines(self)  # before any step: vLLM that cannot take the weights, FSDP that accelerate ignores
        self.add_callback(self._guard)
        self._rewards_per_func: torch.Tensor | None = None
        self._log_sum_sq = LogSumSqCapture(self.model, self.temperature, self.args.cast_lm_head_to_fp32)
        self._log_sum_sq_probs: torch.Tensor | None = None  # of the latest log-prob pass, None if unavailable
        self._training_logps: torch.Tensor | None = None  # of the latest pass with gradients (the loss's)
        self._latest_logps: torch.Tensor | None = None  # of the latest log-prob pass (the loss's, in `_compute_loss`)
        self._update_quality = UpdateQuality(self) if args.update_quality_every > 0 else None
        if self._update_quality is not None:
            self.add_callback(self._update_quality)
        # TRL's max_steps and Lopti's schedule: say once per launch what they give together
        if args.lopti and args.max_steps > 0 and self.is_world_process_zero():
            logger.warning(
                "lopti: max_steps counts optimizer steps (TRL's convention) and Lopti trains %d on each generated "
                "batch: max_steps=%d generates %d batches, half what one-pass GRPO with the same max_steps generates",
                self.optimizer_steps_per_batch(), args.max_steps, args.max_steps // self.optimizer_steps_per_batch(),
            )  # fmt: skip

    # --- TRL override 4 (observes): keeps log Σ p² of the log-prob pass's tokens, for the exact gradient share, and
    # the loss pass's log-probs, for the update-quality metrics; TRL's result is returned unchanged.
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        with self._log_sum_sq.collecting() as parts:
            logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        # the reference model has no capture: nothing is collected, and the (1 − π) bound is the fallback
        self.observe_log_prob_pass(logps, self._log_sum_sq.result(parts, len(logps), logits_to_keep))
        return logps, entropies, aux_loss

    def observe_log_prob_pass(self, logps: torch.Tensor, log_sum_sq: torch.Tensor | None) -> None:
        """Keep a log-prob pass's log Σ p² (None: unavailable) and log-probs for the metrics; a trainer whose forward
        stands in for TRL's calls this with its own pass's."""
        self._log_sum_sq_probs = log_sum_sq
        self._latest_logps = logps.detach()
        if logps.requires_grad:
            self._training_logps = logps.detach()

    # --- TRL override 5 (observes): each micro-step, for the update-quality metrics; TRL's step itself is unchanged.
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._update_quality is not None:
            micro_batch = self._buffered_inputs[(self._step - 1) % self.args.steps_per_generation]
            self._update_quality.after_micro_step(micro_batch, self._training_logps)
        return loss

    def _count_reward_errors(self, count: int) -> None:
        """Count samples a reward function raised on (reward_errors: skip) in the `reward_errors` metric."""
        add_count(self._metrics["train" if self.model.training else "eval"], "lopti/reward_errors", count)

    # --- transformers Trainer override: a resume's "missing keys" warning leaves out the tied weights. safetensors
    # stores a tied output head once, under the input embedding's name, so its key is always "missing" from a checkpoint
    # while its tensor is loaded; any other missing key is still warned about.
    def _issue_warnings_after_load(self, load_result):
        missing = untied_missing_keys(self.accelerator.unwrap_model(self.model), load_result.missing_keys)
        return super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    # --- TRL override 1: keep the rewards, which GRPOTrainer only turns into advantages internally.
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    # --- TRL override 2: swap TRL's (B,) advantages for lopti.core's per-token ones if an estimator is set.
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
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
        if not lengths.any():  # every response truncated under mask_truncated_completions: no token to credit
            return torch.zeros(local_mask.shape, device=local_mask.device)
        global_mask = torch.arange(int(lengths.max()), device=lengths.device)[None, :] < lengths[:, None]
        advantages = token_advantages(rewards, global_mask, self.num_generations, self.args.advantage_estimator)
        per_response = advantages[:, 0].masked_fill(unscorable, 0.0)  # outcome advantages: one per response
        start = self.accelerator.process_index * local_mask.size(0)
        local = per_response[start : start + local_mask.size(0)].to(local_mask.device)
        return local[:, None] * local_mask.to(local.dtype)

    # --- Lopti's schedule. TRL trains on each generated batch for num_iterations passes of steps_per_generation
    # micro-batches, counting micro-steps in `_step`. Lopti (num_iterations=2) makes the first pass its phase 1
    # (π_old < η) and the second its phase 2 (the rest, from the weights phase 1 updated); LoptiGRPOConfig makes
    # each pass whole optimizer steps. `max_steps` keeps TRL's meaning (optimizer steps), so a Lopti run generates
    # half the batches of a GRPO run with the same max_steps (docs/guides/trl.md, "Lopti's schedule").
    def optimizer_steps_per_batch(self) -> int:
        """Return how many optimizer steps train on one generated batch (2 per pass-aligned batch with Lopti)."""
        return max(self.args.steps_per_generation * self.num_iterations // self.args.gradient_accumulation_steps, 1)

    def lopti_phase(self) -> int:
        """Return the Lopti phase of the current micro-step: 0 in the first pass over its generated batch, 1 in the
        second."""
        cycle_step = self._step % (self.args.steps_per_generation * self.num_iterations)
        return lopti_phase(cycle_step, self.args.steps_per_generation)

    def lopti_split_seed(self) -> int:
        """Return the seed of the current micro-batch's random split (`lopti_split='random'`): from the trainer
        seed, the RL step, the micro-batch's slot in the generated batch and the process, so both passes over
        a micro-batch draw the same split. The RL step comes from the optimizer steps, which a resumed run
        restores (TRL's micro-step counter restarts at 0); LoptiGRPOConfig makes a batch whole optimizer steps."""
        rl_step = self.state.global_step // self.optimizer_steps_per_batch()
        slot = self._step % self.args.steps_per_generation
        return split_seed(self.args.seed, rl_step, slot, self.accelerator.process_index)

    # --- TRL override 3: the loss is lopti.core's objective; what stays here is TRL's plumbing. With lopti's loss
    # features off, a TRL loss option beyond grpo/bnpo/dr_grpo/dapo gets GRPOTrainer's own loss (trl_computes_loss).
    def _compute_loss(self, model, inputs):
        mask = _loss_mask(inputs)
        # A micro-batch without a loss token (every response truncated under TRL's mask_truncated_completions, or
        # all tool output): TRL's loss is its MoE router loss alone, and lopti's credit has no token to act on.
        if self._trl_loss or not mask.any():
            return self._trl_compute_loss(model, inputs)
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled, **self.extra_forward_inputs(inputs),
        )  # fmt: skip
        old_logps, advantages = _old_logps_and_advantages(inputs, logps)
        phase = self.lopti_phase() if self.args.lopti else None
        try:
            terms = self._objective(logps, old_logps, advantages, mask, phase, entropies, inputs)
        except NonFiniteError as error:  # the model's numbers, not a setting: report them as such
            raise NumericalFailure(f"optimizer step {self.state.global_step + 1}: {error} in the loss") from error

        per_token = terms.policy
        # TRL's correction for vLLM sampling with other numerics than training; the paper has none, so
        # the paper's recipes turn it off (docs/guides/trl.md).
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
        policy_loss = self._aggregate(per_token, counted, inputs)
        loss = policy_loss if self.loss_type in WINDOW_NORMALISED_LOSS_TYPES else policy_loss / self._accumulation()
        if terms.entropy is not None:
            loss = loss - self.args.entropy_coef * (terms.entropy / self._accumulation())
        if self.aux_loss_enabled:  # TRL's MoE load-balancing loss, scaled for accumulation as TRL scales it
            loss = loss + self.router_aux_loss_coef * aux_loss / self._accumulation()
        loss = self._guard_nonfinite(loss, logps)
        self._log_step_metrics(
            logps, old_logps, advantages, entropies, mask, terms, policy_loss.detach(), phase, kl, aux_loss
        )
        self._log_probability_metrics(logps, old_logps, mask, terms.active, terms.reweighted, phase, advantages)
        return loss

    @staticmethod
    def extra_forward_inputs(inputs: dict) -> dict[str, Any]:
        """Return the micro-batch's model inputs beyond the token ids (images, their layout, token types) as TRL's
        loss forward passes them: lopti's loss forward and the update-quality forward hand them to the model."""
        return {name: inputs.get(name) for name in EXTRA_FORWARD_INPUTS}

    def _trl_compute_loss(self, model, inputs):
        """Return GRPOTrainer's own loss, with its metrics, and log lopti's probability metrics of the same pass
        (on TRL's advantages, which no lopti feature reweights); a non-finite loss is guarded as lopti's is."""
        loss = super()._compute_loss(model, inputs)
        logps = self._latest_logps
        old_logps, advantages = _old_logps_and_advantages(inputs, logps)
        mask = _loss_mask(inputs)
        if mask.any():  # no loss token: no probability to measure
            self._log_probability_metrics(logps, old_logps, mask, mask.bool(), advantages, None)
        return self._guard_nonfinite(loss, logps)

    @staticmethod
    def _make_surrogate(args: LoptiGRPOConfig) -> Surrogate | None:
        """Return the per-token surrogate of `loss_type` for lopti's objective; None: the clipped one."""
        if args.loss_type == "cispo":  # TRL's ε_max is epsilon_high
            return partial(cispo_policy_loss, max_ratio=args.epsilon_high)
        if args.loss_type == "sapo":
            return partial(
                sapo_policy_loss, temperature_pos=args.sapo_temperature_pos, temperature_neg=args.sapo_temperature_neg
            )
        return None

    def _objective(self, logps, old_logps, advantages, mask, phase, entropies, inputs):
        """Return lopti.core's per-token objective terms for one micro-batch under this config."""
        return token_objective(
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
            kl_clamp=self._lopti_loss,  # the authors' clamped k3 with lopti's features, GRPOTrainer's without
            entropies=entropies,
            entropy_bonus=self.args.entropy_coef != 0.0,
            credit=self._credit_steps,
            surrogate=self._surrogate,
        )

    def _accumulation(self) -> float:
        return self.current_gradient_accumulation_steps if self.model.training else 1.0

    def _aggregate(self, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict) -> torch.Tensor:
        """Return the policy loss normalised exactly as TRL normalises its `loss_type`: `dapo` and `cispo` over the
        tokens of the accumulation window, the others over this micro-batch (the caller divides by the accumulation).
        """
        mode = AGGREGATION_OF_LOSS_TYPE[self.loss_type]
        if self.loss_type in WINDOW_NORMALISED_LOSS_TYPES:
            num_tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if self.model.training:
                num_tokens = num_tokens * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return aggregate_loss(per_token, mask, mode, num_tokens=num_tokens)
        loss = aggregate_loss(per_token, mask, mode, max_length=self.max_completion_length)
        if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
            # TRL's per-response means count a response without a counted token (truncated under
            # mask_truncated_completions, all tool output, or every token dropped by a credit step) as a zero, where
            # aggregate_loss leaves it out: keep TRL's denominator, the micro-batch's responses.
            loss = loss * mask.any(dim=1).to(loss.dtype).mean()  # exactly 1 where every response counts
        return loss

    def _guard_nonfinite(self, loss: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
        """Return the loss, or a zero one when it is not finite; `TrainingGuard` then drops the optimizer step's
        update (a zero loss alone would still let Adam's momentum move the weights) and counts it."""
        if self._guard.note_loss(loss):
            return loss
        return torch.zeros((), device=logps.device, requires_grad=True)  # no gradient reaches the model
