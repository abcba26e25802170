"""Each prompt once per group in the forwards: the CPU fast path of rollout and update (docs/performance.md).

A generated batch holds every prompt `num_generations` times, and TRL's forward runs each row in full, so
most of its tokens are copies of the same prompt (about two thirds for the default recipe, plus the padding).
Here the log-prob forwards run on the packed layout of lopti/core/packing.py (each distinct prompt once,
followed by all its completions). Generation likewise runs each distinct prompt's prefill once and copies its
KV cache to the rows that repeat it, and rows that have ended leave the sampling loop's batch
(`shared_prefill_generate`, lopti/train/decode.py). And with several passes over a generated batch, the first
pass's forward runs on the weights that generated it, so its log-probs serve as the old ones and TRL's
separate old log-prob forward is skipped (`PackedForwards._skips_old_forward`).
"""

from __future__ import annotations

import functools

import torch
from accelerate.utils import is_peft_model
from transformers import DynamicCache

from lopti.core.packing import pack_shared_prompts, unpack
from lopti.train.decode import sample_unfinished_rows, sampling_cache


def packed_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_length: int,
    pad_token_id: int,
    chunk_rows: int,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None:
    """Return (log-probs, entropies, log Σ p²) of the completion tokens, as TRL's fused LM head gives them for
    the padded rows, computed with each prompt once per chunk of `chunk_rows` rows; None if no chunk packs.

    `model` must carry TRL's fused LM head (`add_fused_lm_head`); entropies and log Σ p² are None where the
    head does not compute them.
    """
    chunks = []
    for start in range(0, input_ids.size(0), chunk_rows):
        ids, mask = input_ids[start : start + chunk_rows], attention_mask[start : start + chunk_rows]
        packed = pack_shared_prompts(ids, mask, completion_length, pad_token_id)
        if packed is None:
            return None
        chunks.append((packed, len(ids)))
    outputs = []
    for packed, rows in chunks:
        result = model(
            input_ids=packed.input_ids,
            attention_mask=packed.attention_mask,
            position_ids=packed.position_ids,
            shift_labels=packed.shift_labels,
            fused_lm_head=True,
        )
        fields = (result.log_probs, result.entropy, getattr(result, "log_sum_sq_probs", None))
        outputs.append([unpack(values, packed, rows, completion_length) for values in fields])
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*outputs, strict=True))


def packing_applies(model: torch.nn.Module, device: torch.device, enabled: bool) -> bool:
    """Return True where the packed paths may run: asked for, on the CPU (other devices keep TRL's numerics), on
    a plain (not PEFT) model whose sdpa attention takes the 4D masks."""
    return (
        enabled
        and device.type == "cpu"
        and not is_peft_model(model)
        and getattr(model.config, "_attn_implementation", None) == "sdpa"
    )


def shared_prefill_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs):
    """Return `model.generate(input_ids=..., attention_mask=..., **kwargs)`, with each distinct left-padded prompt's
    prefill run once and its KV cache copied to every row that repeats it, and the sampling loop
    `decode.sample_unfinished_rows` (ended rows leave the batch; the cache is preallocated for sampling); the
    tokens are generate's.

    The prefill uses the position ids generate itself derives from the mask, and the prompt's last token is left
    to the sampling loop, whose first step then samples from it as generate does.
    """
    generate = type(model).generate
    if input_ids.size(1) < 2 or {"cache", "past_key_values", "custom_generate"} & set(kwargs):
        return generate(model, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    config = kwargs.get("generation_config") or model.generation_config
    cache = (
        sampling_cache(model, input_ids.size(1) + config.max_new_tokens)
        if config.do_sample and config.num_beams in (None, 1) and config.max_new_tokens
        else DynamicCache(config=model.config)
    )
    distinct, group_of_row = torch.unique(input_ids.masked_fill(attention_mask == 0, -1), dim=0, return_inverse=True)
    if len(distinct) < len(input_ids):
        first = torch.stack([(group_of_row == group).nonzero()[0, 0] for group in range(len(distinct))])
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # generate's own, for left padding
        with torch.no_grad():
            model(
                input_ids=input_ids[first, :-1], attention_mask=attention_mask[first, :-1],
                position_ids=positions[first, :-1], cache=cache, use_cache=True, logits_to_keep=1,
            )  # fmt: skip
        cache.batch_select_indices(group_of_row)
    return generate(
        model, input_ids=input_ids, attention_mask=attention_mask, cache=cache,
        custom_generate=sample_unfinished_rows, **kwargs,
    )  # fmt: skip


class PackedForwards:
    """Mixin for TRL's GRPOTrainer: its rollout and log-prob forwards with each prompt once per group on the CPU.

    `_packed_logps` is for the trainer's `_get_per_token_logps_and_entropies` to try first; `_generate_single_turn`
    (a TRL private method, guarded by tests/train/test_trl_contract.py) wraps TRL's rollout; `_skips_old_forward`
    says when the trainer may leave out the old log-prob forward.
    """

    def _skips_old_forward(self) -> bool:
        """Return True when TRL would run a forward for the old log-probs that the first pass's own forward gives.

        TRL runs it when a generated batch serves more than one optimizer step (num_iterations > 1 or more micro-
        batches than an accumulation); if the whole first pass is one optimizer step (steps_per_generation equals
        gradient_accumulation_steps), every micro-batch of that pass still sees the generating weights.
        """
        args = self.args
        trl_runs_it = args.gradient_accumulation_steps % (args.steps_per_generation * self.num_iterations) != 0
        return (
            trl_runs_it
            and args.steps_per_generation == args.gradient_accumulation_steps
            and not self.use_vllm
            and self.model.training
            and packing_applies(self.accelerator.unwrap_model(self.model), self.accelerator.device, args.cpu_fast_path)
        )

    def _packed_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
                      **others):  # fmt: skip
        """Return TRL's (log-probs, entropies, log Σ p²) from the packed forward, or None where it does not apply
        (`packing_applies`, or extra model inputs: images, the MoE loss)."""
        unwrapped = self.accelerator.unwrap_model(model)
        if not packing_applies(unwrapped, input_ids.device, self.args.cpu_fast_path) or any(
            value is not None and value is not False for value in others.values()
        ):
            return None
        with self.accelerator.autocast():
            packed = packed_log_probs(
                model, input_ids, attention_mask, logits_to_keep, self._tokenizer.pad_token_id or 0,
                batch_size or len(input_ids),
            )  # fmt: skip
        return None if packed is None else (packed[0], packed[1] if compute_entropy else None, packed[2])

    # --- CPU fast path of TRL's rollout: each distinct prompt's prefill once (`shared_prefill_generate`).
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model_wrapped)
        plain = images is None and not multimodal_fields and self.args.cache_implementation is None
        if not (plain and packing_applies(model, self.accelerator.device, self.args.cpu_fast_path)) or (
            self.use_vllm or self.use_transformers_continuous_batching
        ):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kwargs)
        model.generate = functools.partial(shared_prefill_generate, model)  # TRL calls model.generate(...)
        try:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kwargs)
        finally:
            del model.generate
