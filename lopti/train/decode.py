"""The sampling loop of the CPU fast path's rollout: generate's, without the work it spends on ended rows.

`shared_prefill_generate` (packing.py) hands `sample_unfinished_rows` to `generate` as its `custom_generate`
decoding method, so generate still prepares everything (generation config, logits processors, stopping criteria,
attention mask, the prefilled cache) and only the loop differs from `GenerationMixin._sample`: rows that have
sampled an end-of-sequence token leave the batch (their KV cache rows are dropped), so each later step runs its
forward on the rows still sampling. Generate keeps every row until the longest one ends and writes padding for
the ended ones; with the default recipe (64 completions, up to 48 tokens) up to a quarter of its row-steps are
such rows. The cache is preallocated for the whole generation (`sampling_cache`), so a step writes its keys and
values in place instead of copying every layer's cache into a longer tensor.

The tokens are generate's: for one sample per row, `torch.multinomial` takes argmax(p / q) over the vocabulary,
with q ~ Exp(1) drawn for the whole (rows, vocabulary) tensor. Drawing q for all rows, ended or not, and taking
the argmax over the rows still sampling consumes the same random numbers in the same order
(`draws_like_multinomial` checks this once per process; where it fails, generate's own loop runs). The logits
processors are the objects generate built, applied as generate applies them; the loop runs only with the
row-wise ones TRL's sampling settings create (temperature, top-k, top-p, min-p; not the repetition penalty),
stops only at the end-of-sequence tokens and the maximum length, and needs a full-attention dynamic cache and
left padding. Anything else runs generate's own loop. docs/performance.md has the profile and the measurements.
"""

from __future__ import annotations

import functools

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.generation import (
    EosTokenCriteria,
    GenerationMode,
    MaxLengthCriteria,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.utils import GENERATION_MODES_MAPPING

# processors that change each row's scores from that row's logits only, with no per-row state: on the rows still
# sampling they give what they give those rows in the whole batch. (Generate's repetition penalty keeps each row's
# padding length, so it runs generate's own loop.)
ROW_WISE_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper)
# what generate prepares for the model; the loop passes them itself (`logits_to_keep` 1, `use_cache` True)
MODEL_INPUTS = {"attention_mask", "position_ids", "cache", "use_cache", "logits_to_keep"}


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer that writes each step's keys and values into buffers sized for the whole
    generation (grown if that was too short) and serves views of them, where DynamicLayer concatenates every
    layer's cache into new tensors at each step."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = key_states.new_empty(*key_states.shape[:2], self.capacity, key_states.size(-1))
        self.value_buffer = value_states.new_empty(*value_states.shape[:2], self.capacity, value_states.size(-1))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.size(-2)
        if end > self.key_buffer.size(-2):
            self.key_buffer, self.value_buffer = (
                torch.cat([buffer, buffer.new_empty(*buffer.shape[:2], end, buffer.size(-1))], dim=-2)
                for buffer in (self.key_buffer, self.value_buffer)
            )
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def _expose(self) -> None:
        self.keys, self.values = self.key_buffer[:, :, : self.length], self.value_buffer[:, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
            self._expose()


def sampling_cache(model: torch.nn.Module, capacity: int) -> Cache:
    """Return an empty cache for sampling `capacity` positions: preallocated where the model's own DynamicCache
    holds plain full-attention layers, that DynamicCache otherwise (sliding windows, linear attention...)."""
    dynamic = DynamicCache(config=model.config)
    if not dynamic.layers or any(type(layer) is not DynamicLayer for layer in dynamic.layers):
        return dynamic
    return Cache(layers=[PreallocatedLayer(capacity) for _ in dynamic.layers])


def draw_like_multinomial(probs: torch.Tensor, rows: torch.Tensor, all_rows: int) -> torch.Tensor:
    """Return the tokens `torch.multinomial(p, 1)` samples for the rows `rows` of an (`all_rows`, vocabulary) tensor
    p, given their probabilities `probs`: argmax(p / q) per row, with the Exp(1) noise q drawn for all the rows of p
    as multinomial draws it, so the random numbers consumed are the same."""
    noise = torch.empty((all_rows, probs.size(-1)), dtype=probs.dtype, device=probs.device).exponential_()
    return (probs / noise[rows]).argmax(dim=-1)


@functools.cache
def draws_like_multinomial() -> bool:
    """Return True if this torch's `multinomial` draws one sample per row as `draw_like_multinomial` does."""
    probs = torch.rand(8, 50, generator=torch.Generator().manual_seed(0)).softmax(dim=-1)
    state = torch.get_rng_state()
    try:
        expected = torch.multinomial(probs, num_samples=1).squeeze(1)
        torch.set_rng_state(state)
        ours = draw_like_multinomial(probs, torch.arange(8), 8)
    finally:
        torch.set_rng_state(state)
    return torch.equal(ours, expected)


def _loop_applies(model_kwargs: dict, logits_processor, stopping_criteria, generation_config, streamer) -> bool:
    """Return True when `sample_unfinished_rows` reproduces what generate's own sampling loop would do."""
    mask = model_kwargs.get("attention_mask")
    cache = model_kwargs.get("cache")
    return (
        generation_config.get_generation_mode() == GenerationMode.SAMPLE
        and not generation_config.return_dict_in_generate
        and streamer is None
        and set(model_kwargs) <= MODEL_INPUTS
        and model_kwargs.get("use_cache") is not False
        and mask is not None
        and bool((mask[:, 1:] >= mask[:, :-1]).all())  # left padding: positions follow from the mask
        and isinstance(cache, Cache)
        and all(type(layer) in (DynamicLayer, PreallocatedLayer) for layer in cache.layers)  # rows selectable
        and all(type(processor) in ROW_WISE_PROCESSORS for processor in logits_processor)
        and all(type(criterion) in (EosTokenCriteria, MaxLengthCriteria) for criterion in stopping_criteria)
        and any(type(criterion) is MaxLengthCriteria for criterion in stopping_criteria)
        and draws_like_multinomial()
    )


def sample_unfinished_rows(
    model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, streamer=None,
    **model_kwargs,
):  # fmt: skip
    """Return what `generate` returns for multinomial sampling: `input_ids` followed by the sampled tokens, rows
    that ended early padded; runs the forwards of each step on the rows still sampling only.

    A `custom_generate` decoding method for `GenerationMixin.generate`; where it cannot reproduce generate's loop
    (`_loop_applies`), runs that loop instead.
    """
    if synced_gpus or not _loop_applies(model_kwargs, logits_processor, stopping_criteria, generation_config, streamer):
        own_loop = getattr(type(model), GENERATION_MODES_MAPPING[generation_config.get_generation_mode()])
        return own_loop(
            model, input_ids, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
            generation_config=generation_config, synced_gpus=synced_gpus, streamer=streamer, **model_kwargs,
        )  # fmt: skip
    cache, mask = model_kwargs["cache"], model_kwargs["attention_mask"]
    ends = [criterion.eos_token_id.flatten() for criterion in stopping_criteria if type(criterion) is EosTokenCriteria]
    end_tokens = torch.cat(ends) if ends else None
    max_length = min(criterion.max_length for criterion in stopping_criteria if type(criterion) is MaxLengthCriteria)
    batch, width = input_ids.shape
    steps = max(max_length - width, 1)  # generate samples one token even from a prompt at the maximum length
    pad = generation_config._pad_token_tensor  # what generate writes after a row's end
    sequences = torch.cat([input_ids, input_ids.new_full((batch, steps), 0 if pad is None else int(pad))], dim=1)
    attention = torch.cat([mask, mask.new_ones(batch, steps)], dim=1)
    positions = model_kwargs.get("position_ids")
    if positions is None or positions.shape != input_ids.shape:
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # generate's own for left padding (0 on padding)
    past = cache.get_seq_length()
    rows = torch.arange(batch, device=input_ids.device)  # the original rows still in the batch
    tokens, position_ids, length = input_ids[:, past:], positions[:, past:], width
    for _ in range(steps):
        logits = model(
            input_ids=tokens, attention_mask=attention[rows, :length], position_ids=position_ids, cache=cache,
            use_cache=True, logits_to_keep=1,
        ).logits[:, -1].to(copy=True, dtype=torch.float32)  # fmt: skip
        scores = logits_processor(sequences[rows, :length], logits)
        tokens = draw_like_multinomial(torch.softmax(scores, dim=-1), rows, batch)
        sequences[rows, length] = tokens
        length += 1
        going = torch.ones_like(tokens, dtype=torch.bool) if end_tokens is None else ~torch.isin(tokens, end_tokens)
        if not bool(going.any()):
            break
        if not bool(going.all()):
            kept = going.nonzero().flatten()
            rows, tokens = rows[kept], tokens[kept]
            cache.batch_select_indices(kept)
        tokens, position_ids = tokens[:, None], positions[rows, -1:] + (length - width)
    return sequences[:, :length]
