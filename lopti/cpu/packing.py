"""Each prompt once per group in the forwards: the CPU fast path of rollout and update (docs/performance.md).

A generated batch holds every prompt `num_generations` times, and TRL's forward runs each row in full, so
most of its tokens are copies of the same prompt (about two thirds for the default recipe, plus the padding).
Here the log-prob forwards run on the packed layout of lopti/core/packing.py (each distinct prompt once,
followed by all its completions). Generation likewise runs each distinct prompt's prefill once and copies its
KV cache to the rows that repeat it, and rows that have ended leave the sampling loop's batch
(`shared_prefill_generate`, lopti/cpu/decode.py). And with several passes over a generated batch, the first
pass's forward runs on the weights that generated it, so its log-probs serve as the old ones and TRL's
separate old log-prob forward is skipped. `CpuFastPath` (lopti/cpu/fast_path.py) hooks these into the trainer.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator

import torch
from accelerate.utils import is_peft_model
from transformers import DynamicCache

from lopti.core.packing import IGNORED, PackedRows, pack_shared_prompts, unpack
from lopti.cpu.decode import CACHE_KEYWORD, sample_unfinished_rows, sampling_cache

# The most answer positions preallocated ahead (the longest budget of the shipped recipes); longer generations grow.
PREALLOCATED_STEPS = 4096
# The fewest leading tokens shared by every row for the prefill to run them once for all rows: below it the extra
# forward costs more than it saves.
SHARED_PREFIX_MIN = 16


def packed_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_length: int,
    pad_token_id: int,
    chunk_rows: int,
    temperature: float = 1.0,
    frozen: torch.Tensor | None = None,
    frozen_model: torch.nn.Module | None = None,
    frozen_block: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None:
    """Return (log-probs, entropies, log Σ p²) of the completion tokens at `temperature`, as TRL's fused LM head
    gives them for the padded rows, computed with each prompt once per chunk of `chunk_rows` rows; None if no chunk
    packs.

    The model's own forward gives the logits (its LM head in the autocast dtype, softcapping and scales included),
    from the first column holding a completion token on, and they are read at the completion positions only. TRL's
    fused head would avoid holding them, at a cost the CPU pays in full: without Triton it scores every position,
    prompts and padding too, and accumulates its gradient in fp32 products; the completions' logits of a CPU batch
    take a few hundred MB.

    `frozen` (bool per row) marks the rows whose log-probs the caller's loss gives no gradient: a prompt whose rows
    are all frozen runs its forward without autograd, so the backward skips it. In each chunk one prompt keeps
    autograd all the same, so that the loss reaches every weight with the zero gradient the padded forward gives it
    (an optimizer step passes over a weight without a gradient, where Adam's moments would have moved it) and each
    process of a DDP run makes one wrapped forward per chunk whatever its rewards. The forward without autograd runs
    on `frozen_model` (`model` if None; the model out of its DDP wrapper, whose forward joins the processes'
    collectives) inside `frozen_block()` (where the caller turns gradient checkpointing off, as TRL does for a
    forward without autograd), before the chunk's forward with autograd.
    """
    chunks = []
    for start in range(0, input_ids.size(0), chunk_rows):
        ids, mask = input_ids[start : start + chunk_rows], attention_mask[start : start + chunk_rows]
        if not mask[:, -completion_length:].any():  # no completion token (TRL's mask_truncated_completions)
            return None
        packed = pack_shared_prompts(ids, mask, completion_length, pad_token_id)
        if packed is None:
            return None
        learning = torch.ones(len(packed.input_ids), dtype=torch.bool, device=ids.device)
        if frozen is not None:
            learning = torch.zeros_like(learning)
            learning[packed.row_groups[~frozen[start : start + chunk_rows]]] = True
            if not learning.any():  # one prompt keeps autograd (see above): one with a completion token
                learning[int((packed.shift_labels != IGNORED).any(dim=1).int().argmax())] = True
        chunks.append((packed, len(ids), learning))
    outputs = []
    for packed, rows, learning in chunks:
        scored = packed.shift_labels != IGNORED
        # the LM head only from the first column any row scores: the prompt's other positions need no vocabulary
        kept = scored.size(1) - int(scored.any(dim=0).int().argmax())
        pieces = []
        if not learning.all():
            index = (~learning).nonzero().flatten()
            with torch.no_grad(), frozen_block():
                forward = model if frozen_model is None else frozen_model
                pieces.append((index, _packed_statistics(forward, packed, index, kept, temperature)))
        index = learning.nonzero().flatten()
        pieces.append((index, _packed_statistics(model, packed, index, kept, temperature)))
        order = torch.cat([index for index, _ in pieces]).argsort()
        grids = [torch.cat(field)[order] for field in zip(*(fields for _, fields in pieces), strict=True)]
        outputs.append([unpack(grid, packed, rows, completion_length) for grid in grids])
    return tuple(torch.cat(parts) for parts in zip(*outputs, strict=True))


def _packed_statistics(
    model: torch.nn.Module, packed: PackedRows, index: torch.Tensor, kept: int, temperature: float
) -> list[torch.Tensor]:
    """Return (log π, entropy, log Σ p²) at every position of the packed rows `index`, each (len(index), width), 0
    where no token is scored; the model's LM head scores the last `kept` columns."""
    labels = packed.shift_labels[index]
    scored = labels != IGNORED
    logits = model(
        input_ids=packed.input_ids[index],
        attention_mask=packed.attention_mask[index],
        position_ids=packed.position_ids[index],
        use_cache=False,
        logits_to_keep=kept,
    ).logits
    kept_scored = scored[:, -kept:]
    fields = token_statistics(logits[kept_scored], labels[:, -kept:][kept_scored], temperature)
    return [logits.new_zeros(scored.shape, dtype=values.dtype).masked_scatter(scored, values) for values in fields]


def token_statistics(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (log π(token), entropy, log Σ p²) per row of `logits` (tokens, vocabulary) divided by `temperature`,
    in fp32; log Σ p² carries no gradient (it is a measurement: lopti.core.bound)."""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = log_probs.exp()
    entropy = -(probs * log_probs).sum(dim=-1)
    with torch.no_grad():
        log_sum_sq = torch.logsumexp(2 * log_probs, dim=-1)
    return log_probs.gather(-1, tokens[:, None]).squeeze(-1), entropy, log_sum_sq


def packing_applies(model: torch.nn.Module, device: torch.device) -> bool:
    """Return True where the packed paths may run: on the CPU (other devices keep TRL's numerics), on a plain (not
    PEFT) model whose sdpa attention takes the 4D masks."""
    return (
        device.type == "cpu"
        and not is_peft_model(model)
        and getattr(model.config, "_attn_implementation", None) == "sdpa"
    )


@contextlib.contextmanager
def fast_generation(model, weights: torch.nn.Module | None = None, same_draws: bool = True) -> Iterator[None]:
    """Within the block, `model.generate(...)` is `shared_prefill_generate(weights or model, ...)`: generate's
    tokens, each shared prefill once and ended rows left out (TRL's rollout and lopti's evaluation call it).
    `weights` is a copy of the model to generate with instead (`precision.LowPrecisionCopy`); without `same_draws`
    sampled tokens come from generate's distribution but not its random numbers (`decode.draw_by_inverse_cdf`)."""
    model.generate = functools.partial(
        shared_prefill_generate, model if weights is None else weights, same_draws=same_draws
    )
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


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Return how many leading tokens every row of a left-padded batch shares (0 for a single row): the common
    start of the prompts, such as a system message and a worked example, whose prefill can run once."""
    if len(input_ids) < 2:
        return 0
    lengths = attention_mask.sum(dim=1)
    shortest = int(lengths.min())
    if shortest == 0:
        return 0
    starts = input_ids.size(1) - lengths  # left padding: each row's first real token
    columns = starts[:, None] + torch.arange(shortest, device=input_ids.device)
    real = input_ids.gather(1, columns)  # each row's first `shortest` real tokens
    differs = (real != real[:1]).any(dim=0)
    return int(differs.int().argmax()) if differs.any() else shortest


def prefix_first(input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: int) -> tuple[torch.Tensor, ...]:
    """Return (ids, mask) of a left-padded batch laid out as [shared prefix, padding, the rest of each row]: the
    same width and tokens, each row's first `prefix` tokens in the first columns, so one cache prefill of them
    serves every row. Positions still follow from the mask (a row's count of real tokens before each one)."""
    starts = (input_ids.size(1) - attention_mask.sum(dim=1)).tolist()
    ids, mask = input_ids.clone(), attention_mask.clone()
    for row, start in enumerate(starts):
        if start:
            ids[row, :prefix] = input_ids[row, start : start + prefix]
            ids[row, prefix : prefix + start] = input_ids[row, :start]
            mask[row, :prefix] = 1
            mask[row, prefix : prefix + start] = 0
    return ids, mask


def shared_prefill_generate(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, same_draws: bool = True, **kwargs
):  # fmt: skip
    """Return `model.generate(input_ids=..., attention_mask=..., **kwargs)` with the prefill shared and the sampling
    loop `decode.sample_unfinished_rows` (ended rows leave the batch; the cache is preallocated for sampling); the
    tokens are generate's up to float rounding.

    The prefill runs the tokens every row shares (`shared_prefix_length`, at least `SHARED_PREFIX_MIN`) once, then
    each distinct prompt's rest once, and copies the KV cache to every row that repeats it; with a shared prefix the
    returned rows hold it in their first columns (`prefix_first`), the completions in the same columns as
    generate's. The prefill uses the position ids generate itself derives from the mask, and the prompt's last
    token is left to the sampling loop, whose first step then samples from it as generate does. `same_draws`: see
    `decode.sample_unfinished_rows`.
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
    prefix = min(shared_prefix_length(input_ids, attention_mask), input_ids.size(1) - 1)
    if prefix < SHARED_PREFIX_MIN:
        prefix = 0
    else:
        input_ids, attention_mask = prefix_first(input_ids, attention_mask, prefix)
    distinct, group_of_row = torch.unique(input_ids.masked_fill(attention_mask == 0, -1), dim=0, return_inverse=True)
    if len(distinct) == len(input_ids):  # no prompt repeats: each row its own group, in its own place
        group_of_row = torch.arange(len(input_ids), device=input_ids.device)
    if prefix or len(distinct) < len(input_ids):
        first = torch.stack([(group_of_row == group).nonzero()[0, 0] for group in range(len(distinct))])
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # generate's own, for any padding
        with torch.no_grad():
            if prefix:
                model(
                    input_ids=input_ids[:1, :prefix], attention_mask=attention_mask[:1, :prefix],
                    position_ids=positions[:1, :prefix], **{CACHE_KEYWORD: cache}, use_cache=True, logits_to_keep=1,
                )  # fmt: skip
                cache.batch_select_indices(torch.zeros(len(first), dtype=torch.long, device=input_ids.device))
            if prefix < input_ids.size(1) - 1:
                model(
                    input_ids=input_ids[first, prefix:-1], attention_mask=attention_mask[first, :-1],
                    position_ids=positions[first, prefix:-1], **{CACHE_KEYWORD: cache}, use_cache=True,
                    logits_to_keep=1,
                )  # fmt: skip
        if len(distinct) < len(input_ids):
            cache.batch_select_indices(group_of_row)
    # generate hands a custom decoding method no streamer (transformers 5.9-5.25 drop it): the loop gets it here, after
    # the prompts generate would have streamed first
    streamer = kwargs.pop("streamer", None)
    if streamer is not None:
        streamer.put(input_ids.cpu())
    loop = functools.partial(sample_unfinished_rows, same_draws=same_draws, streamer=streamer)
    return generate(
        model, input_ids=input_ids, attention_mask=attention_mask, **{CACHE_KEYWORD: cache}, custom_generate=loop,
        **kwargs,
    )  # fmt: skip
