"""`CpuFastPath`: TRL's rollout and log-prob forwards with each prompt once per group, on the CPU.

A mixin for TRL's `GRPOTrainer` or a subclass of it, placed first: `class T(CpuFastPath, GRPOTrainer)`; lopti's
trainer with it is `lopti.cpu.CpuLoptiGRPOTrainer`, which `lopti train` uses on the CPU unless its `cpu_fast_path`
is false. Mixing it in is the switch: it reads no setting, and it is not a base of `LoptiGRPOTrainer`, so on a GPU
none of it runs. It changes how TRL's numbers are computed, never which ones (the same up to float rounding;
docs/guides/trl.md states the tolerances), with one exception: the rollout samples from generate's distribution with
one uniform number per row and step, not generate's random numbers (multinomial's Exp(1) draw for every vocabulary
entry of every row at every step costs SmolLM2 about a third of a decode step; `draws_like_generate = True` gives
generate's very tokens for the same seed). It overrides four TRL methods:
- `_generate_single_turn`: the rollout's prefill once per distinct prompt, and a sampling loop that drops ended
  rows (`shared_prefill_generate`, lopti/cpu/packing.py and lopti/cpu/decode.py);
- `_get_per_token_logps_and_entropies`: the log-prob forward on the packed layout (`packed_log_probs`);
- `_generate_and_score_completions`: where TRL would run a forward for the old log-probs that the first pass's own
  forward gives (`skips_old_forward`), that forward is left out ...
- `_compute_loss`: ... and the first pass's log-probs are kept as the micro-batch's `old_per_token_logps` for the
  later passes; the rows the loss gives no gradient (`_rows_without_gradient`, which the trainer that defines the
  loss answers: lopti's, for a group whose rewards tie) run their forward without autograd, so the backward skips
  them.
It acts only where `packing_applies`: the device is the CPU, and the model is a plain (not PEFT) sdpa model without
extra inputs (images, the MoE loss) whose layers are all full attention (`model_problem`); the rollout, also only
for sampling or greedy decoding with the cache it builds itself (`generation_problem`); never for a model sharded
across processes (`is_sharded`: each forward of a sharded model gathers its weights, a collective every process
must join, and the fast path's forwards, as many as each process's own batch needs, would leave them out of step).
Anywhere else every call is TRL's own, with a debug-level log line saying why.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation import GenerationMode
from trl.models.utils import disable_gradient_checkpointing

from lopti.cpu import packing
from lopti.cpu.precision import LowPrecisionCopy
from lopti.train.engines import is_sharded

logger = logging.getLogger(__name__)


def model_problem(model: torch.nn.Module) -> str | None:
    """Return why the fast path cannot run `model`'s forwards, or None if it can.

    Its forwards give many rows one prompt's keys and values (a 4D mask over a packed layout, a cache copied
    between rows), which is right only where every layer is full attention. A recurrent or convolutional layer
    (linear-attention and other hybrid models) carries state that no mask restricts, and a sliding window is not in
    the packed mask; the layers are read from the cache the model itself builds (`DynamicCache(config=...)`).
    """
    layers = DynamicCache(config=model.config).layers
    others = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    return f"its cache has {', '.join(others)} layers, not only full attention" if others else None


def generation_problem(config: GenerationConfig) -> str | None:
    """Return why the fast path's rollout cannot reproduce `generate` under `config`, or None if it can: it
    samples (or decodes greedily) one sequence per row from a cache it builds itself."""
    mode = config.get_generation_mode()
    if mode not in (GenerationMode.SAMPLE, GenerationMode.GREEDY_SEARCH):
        return f"generation mode {mode.value} (num_beams={config.num_beams})"
    if (config.num_return_sequences or 1) > 1:
        return f"num_return_sequences={config.num_return_sequences}"
    if config.cache_implementation is not None:
        return f"cache_implementation={config.cache_implementation!r}"
    if config.use_cache is False:
        return "use_cache=False"
    return None


def skips_old_forward(args: Any, num_iterations: int) -> bool:
    """Return True when TRL runs a forward for old log-probs that the first pass's own forward also gives.

    TRL runs it when a generated batch serves more than one optimizer step (num_iterations > 1 or more micro-batches
    than an accumulation); if the whole first pass is one optimizer step (steps_per_generation equals
    gradient_accumulation_steps), every micro-batch of that pass still sees the generating weights.
    """
    trl_runs_it = args.gradient_accumulation_steps % (args.steps_per_generation * num_iterations) != 0
    return trl_runs_it and args.steps_per_generation == args.gradient_accumulation_steps


class CpuFastPath:
    """Mixin: TRL's rollout and log-prob forwards with each prompt once per group on the CPU (see the module).

    Put it first among the bases, `class T(CpuFastPath, SomeGRPOTrainer)`, so that its forwards stand in for
    TRL's under any subclass's own wrappers; `lopti.cpu.CpuLoptiGRPOTrainer` is lopti's trainer with it.
    """

    # TRL itself makes the nested calls below, so no argument of ours can reach them: each of these holds for the
    # length of one outer call and is cleared when it returns. During `_generate_and_score_completions`, TRL's
    # old-log-prob forward is left out ...
    _old_forward_to_skip = False
    # ... and during `_compute_loss` on the first pass over such a batch, the pass's log-probs become the
    # micro-batch's old ones (TRL's `inputs`, a dict TRL reuses for the later passes).
    _first_pass_batch: dict[str, Any] | None = None
    # ... and during `_compute_loss` with autograd on, the micro-batch's rows that its loss gives no gradient
    # (`_rows_without_gradient`), taken by the loss's forward, the first in it, which runs them without autograd.
    _frozen_rows: torch.Tensor | None = None
    # Why it left calls to TRL, each logged once.
    _fast_path_notes: frozenset[str] = frozenset()
    # The bf16 copy of the weights that generation runs on under `bf16` (`generation_weights`).
    _bf16_weights: LowPrecisionCopy | None = None
    # True: the rollout draws generate's tokens from generate's random numbers (`draws.draw_like_multinomial`), as
    # the tests comparing the fast path with TRL's own paths need; False: from the same distribution by inverse CDF
    # (`draws.draw_by_inverse_cdf`): 0.90x the default recipe's generation (bench/rollout_draws.py).
    draws_like_generate: bool = False

    def _fast_path_applies(self, model: torch.nn.Module, device: torch.device, problem: str | None = None) -> bool:
        """Return True where the fast path runs; where it was asked for but cannot (`model_problem`, or the caller's
        `problem`), note why at debug level, once per reason."""
        model = self.accelerator.unwrap_model(model)
        if not packing.packing_applies(model, device):
            return False
        problem = ("the model is sharded (FSDP or ZeRO-3)" if is_sharded(self) else model_problem(model)) or problem
        if problem is None:
            return True
        if problem not in self._fast_path_notes:
            self._fast_path_notes = self._fast_path_notes | {problem}  # this instance's own set, never the class's
            logger.debug("lopti: the CPU fast path leaves this to TRL's own code: %s", problem)
        return False

    # --- TRL override: leaves out the old-log-prob forward that the first pass's own forward gives.
    def _generate_and_score_completions(self, inputs):
        self._old_forward_to_skip = (
            self.model.training
            and not self.use_vllm
            and skips_old_forward(self.args, self.num_iterations)
            and self._fast_path_applies(self.model, self.accelerator.device)
        )
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._old_forward_to_skip = False

    # --- TRL override: on the first pass over a batch whose old-log-prob forward was left out, keeps the pass's
    # log-probs as the micro-batch's old ones. TRL leaves `old_per_token_logps` out only when it runs no old forward,
    # so under `skips_old_forward` a missing one means this path left it out.
    def _compute_loss(self, model, inputs):
        first_pass = (
            self.model.training
            and inputs.get("old_per_token_logps") is None
            and skips_old_forward(self.args, self.num_iterations)
        )
        self._first_pass_batch = inputs if first_pass else None
        self._frozen_rows = self._rows_without_gradient(inputs) if torch.is_grad_enabled() else None
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._first_pass_batch, self._frozen_rows = None, None

    def _rows_without_gradient(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        """Return which rows of a micro-batch the loss gives no gradient (bool per row), whose log-prob forward then
        runs without autograd, or None where that is not known. Only the trainer that defines the loss can say;
        here nothing is known."""
        return None

    # --- TRL override: the log-prob forward on the packed layout, where it applies.
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if self._old_forward_to_skip and not torch.is_grad_enabled():  # TRL's old log-probs: left out
            self._old_forward_to_skip = False
            return None, None, None
        packed = self._packed_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if packed is None:
            logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        else:
            (logps, entropies, log_sum_sq), aux_loss = packed, None
            self._after_packed_pass(logps, log_sum_sq)
        if self._first_pass_batch is not None and logps.requires_grad:
            self._first_pass_batch["old_per_token_logps"] = logps.detach()
        return logps, entropies, aux_loss

    def _after_packed_pass(self, logps: torch.Tensor, log_sum_sq: torch.Tensor | None) -> None:
        """Hook for a trainer that observes its log-prob passes: called with each packed pass's log-probs and log Σ p²
        (TRL's row layout; None where the head did not compute it), which TRL's own pass, skipped, would have seen.
        Does nothing here."""

    def _packed_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
                      **others):  # fmt: skip
        """Return TRL's (log-probs, entropies, log Σ p²) from the packed forward, or None where it does not apply
        (`packing_applies`, or extra model inputs: images, the MoE loss)."""
        frozen, self._frozen_rows = self._frozen_rows, None  # for the loss's own forward, the first of `_compute_loss`
        extra = sorted(name for name, value in others.items() if value is not None and value is not False)
        problem = f"model inputs beyond the tokens ({', '.join(extra)})" if extra else None
        if not self._fast_path_applies(model, input_ids.device, problem):
            return None
        unwrapped = self.accelerator.unwrap_model(model)
        no_checkpointing = functools.partial(
            disable_gradient_checkpointing, unwrapped, self.args.gradient_checkpointing_kwargs
        )
        with self.accelerator.autocast():
            packed = packing.packed_log_probs(
                model, input_ids, attention_mask, logits_to_keep, self._tokenizer.pad_token_id or 0,
                batch_size or len(input_ids), self.temperature, frozen, unwrapped, no_checkpointing,
            )  # fmt: skip
        return None if packed is None else (packed[0], packed[1] if compute_entropy else None, packed[2])

    # --- TRL override: the rollout's prefill once per distinct prompt, and a sampling loop without the ended rows.
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model_wrapped)
        if self.use_vllm or self.use_transformers_continuous_batching:  # not generate: nothing to speed up
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kwargs)
        images_given = images is not None or bool(multimodal_fields)  # the shared prefill runs the tokens alone
        problem = "images in the prompts" if images_given else self._generation_problem()
        if not self._fast_path_applies(model, self.accelerator.device, problem):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kwargs)
        weights = self.generation_weights(model)
        with packing.fast_generation(model, weights, same_draws=self.draws_like_generate):  # TRL calls model.generate
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kwargs)

    def generation_weights(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the model to generate with: under TRL's `bf16` a bf16 copy of `model`'s current weights (the
        update runs under autocast; see lopti/cpu/precision.py), else `model` itself."""
        if not self.args.bf16:
            return model
        if self._bf16_weights is None:
            self._bf16_weights = LowPrecisionCopy(torch.bfloat16)
        return self._bf16_weights.of(model)

    def _generation_problem(self) -> str | None:
        config = getattr(self, "generation_config", None)  # TRL's, for transformers' generate (None with vLLM)
        return None if config is None else generation_problem(config)
