"""Each prompt once per group in the forwards: the CPU fast path of rollout and update (docs/performance.md).

A generated batch holds every prompt `num_generations` times, and TRL's forward runs each row in full, so
most of its tokens are copies of the same prompt (about two thirds for the default recipe, plus the padding).
Here the log-prob forwards run on the packed layout of lopti/core/packing.py (each distinct prompt once,
followed by all its completions). Generation likewise runs each distinct prompt's prefill once and copies its
KV cache to the rows that repeat it, and rows that have ended leave the sampling loop's batch
(`shared_prefill_generate`, lopti/train/decode.py). And with several passes over a generated batch, the first
pass's forward runs on the weights that generated it, so its log-probs serve as the old ones and TRL's
separate old log-prob forward is skipped. `CpuFastPath` (lopti/train/fast_path.py) hooks these into the trainer.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator

import torch
from accelerate.utils import is_peft_model
from transformers import DynamicCache

from lopti.core.packing import pack_shared_prompts, unpack
from lopti.train.decode import sample_unfinished_rows, sampling_cache

# The most answer positions preallocated ahead (the longest budget of the shipped recipes); longer generations grow.
PREALLOCATED_STEPS = 4096


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
        if not mask[:, -completion_length:].any():  # no completion token (TRL's mask_truncated_completions)
            return None
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


@contextlib.contextmanager
def fast_generation(model) -> Iterator[None]:
    """Within the block, `model.generate(...)` is `shared_prefill_generate(model, ...)`: the same tokens, each
    distinct prompt's prefill once and ended rows left out (TRL's rollout and lopti's evaluation call it)."""
    model.generate = functools.partial(shared_prefill_generate, model)
    try:
        yield
    finally:
        del model.generate


def preallocated_positions(model, prompt_length: int, max_new_tokens: int) -> int:
    """Return the cache positions to preallocate for sampling: the prompt and the answer budget, but never more than
    the model attends to (its config's `max_position_embeddings`) nor `PREALLOCATED_STEPS` beyond the prompt.

    A budget far past what generation can use (10⁹ tokens) would otherwise ask for terabytes before the first
    step; a generation longer than what is preallocated grows the buffers (`PreallocatedLayer.update`).
    """
    positions = prompt_length + min(max_new_tokens, PREALLOCATED_STEPS)
    limit = getattr(model.config, "max_position_embeddings", None)
    return min(positions, limit) if isinstance(limit, int) and limit > prompt_length else positions


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
    # the settings generate will use: its generation config with the keyword arguments over it, as generate merges
    # them (lopti's evaluation passes its budget as `max_new_tokens`)
    config = copy.deepcopy(kwargs.get("generation_config") or model.generation_config)
    config.update(**kwargs)
    cache = (
        sampling_cache(model, preallocated_positions(model, input_ids.size(1), config.max_new_tokens))
        if config.num_beams in (None, 1) and config.max_new_tokens
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
