"""The sampling loop of the CPU fast path's rollout: generate's, without the work it spends on ended rows.

`shared_prefill_generate` (packing.py) hands `sample_unfinished_rows` to `generate` as its `custom_generate`
decoding method, so generate still prepares everything (generation config, logits processors, stopping criteria,
attention mask, the prefilled cache) and only the loop differs from `GenerationMixin._sample`: rows that have
sampled an end-of-sequence token leave the batch (their KV cache rows are dropped), together once they are
1 / LEAVE_AT of it, so the later steps run their forwards on the rows still sampling and a few ended ones.
Generate keeps every row until the longest one ends and writes padding for the ended ones. The cache is
preallocated for the whole generation (`sampling_cache`), so a step writes its keys and values in place instead
of copying every layer's cache into a longer tensor.

The tokens are generate's: for one sample per row, `torch.multinomial` takes argmax(p / q) over the vocabulary,
with q ~ Exp(1) drawn for the whole (rows, vocabulary) tensor. Drawing q for all rows, ended or not, and taking
the argmax over the rows still sampling consumes the same random numbers in the same order
(`draws_like_multinomial` checks this once per process; where it fails, generate's own loop runs). The logits
processors are the objects generate built, applied as generate applies them; the loop runs only with the
row-wise ones TRL's sampling settings create (temperature, top-k, top-p, min-p; not the repetition penalty),
stops only at the end-of-sequence tokens and the maximum length, streams each step's tokens as generate's loop does
(padding after a row's end: a streamer shows progress), and needs a full-attention dynamic cache and
left padding (after a prefix all rows share, see `packing.prefix_first`). Anything else runs generate's own loop.

During the loop the model's sdpa attention runs its single-query steps through `single_query_attention`
(`matmul_decode_attention` switches it on for the loop only), which reads the keys and values of a prompt that
several rows repeat once per prompt (`SharedPrompt`, passed as a model input, which transformers hands down to
the attention function) instead of once per row: the attention of a decode step is bound by reading the cache
from memory, and with 8 generations per prompt most of it is the same prompt 8 times. Its values are sdpa's up to
float rounding, so the logits may differ from generate's in the last bits; the tokens were generate's in every
test and benchmark round (a token flips only where two candidates' p / q tie to within that rounding).
docs/performance.md has the measured ratio; bench/profile_rollout.py profiles the rollout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
from transformers import AttentionInterface
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
from transformers.generation.utils import ALL_CACHE_NAMES, GENERATION_MODES_MAPPING
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from lopti.cpu.draws import draw_by_inverse_cdf, draw_like_multinomial, draws_like_multinomial

# processors that change each row's scores from that row's logits only, with no per-row state: on the rows still
# sampling they give what they give those rows in the whole batch. (Generate's repetition penalty keeps each row's
# padding length, so it runs generate's own loop.)
ROW_WISE_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper)
# The keyword the models take their KV cache by: `cache` from transformers 5.24, `past_key_values` before (which
# rejects `cache`); the prefill and the loop pass it under this name, so the fast path runs on every version allowed.
CACHE_KEYWORD = "cache" if "cache" in ALL_CACHE_NAMES else "past_key_values"
# what generate prepares for the model; the loop passes them itself (`logits_to_keep` 1, `use_cache` True; the
# cache's length gives the positions older transformers pass as `cache_position`)
MODEL_INPUTS = {"attention_mask", "position_ids", CACHE_KEYWORD, "cache_position", "use_cache", "logits_to_keep"}
MATMUL_DECODE = "lopti_matmul_decode"  # the attention implementation's name while the loop runs
# what an attention module may pass that changes the attention beyond the mask; any of them runs sdpa
ATTENTION_EXTRAS = ("softcap", "sliding_window", "s_aux", "position_bias")
# ended rows leave the sampling loop's batch together, once they are 1 / LEAVE_AT of it: dropping rows copies every
# layer's cache, which costs more than keeping a few ended rows in the forwards for a few steps (bench/decode_cache.py)
LEAVE_AT = 16


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
        """Keep the rows `indices` of the cache: the positions written so far are gathered, and written over the
        first rows of the same buffers where they hold that many rows (rows leaving the sampling loop), so a step
        copies the cache written so far, not its capacity."""
        if self.is_initialized:
            self.key_buffer = self._kept(self.key_buffer, indices)
            self.value_buffer = self._kept(self.value_buffer, indices)
            self._expose()

    def _kept(self, buffer: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        kept = buffer[indices, :, : self.length]
        if len(indices) > len(buffer):  # rows repeated (a shared prefill copied to its group)
            buffer = buffer.new_empty(len(indices), *buffer.shape[1:])
        buffer = buffer[: len(indices)]
        buffer[:, :, : self.length] = kept
        return buffer


def sampling_cache(model: torch.nn.Module, capacity: int) -> Cache:
    """Return an empty cache for sampling `capacity` positions: preallocated where the model's own DynamicCache
    holds plain full-attention layers, that DynamicCache otherwise (sliding windows, linear attention...)."""
    dynamic = DynamicCache(config=model.config)
    if not dynamic.layers or any(type(layer) is not DynamicLayer for layer in dynamic.layers):
        return dynamic
    return Cache(layers=[PreallocatedLayer(capacity) for _ in dynamic.layers])


class SharedPrompt(NamedTuple):
    """The keys and values of the prompts that several rows of the batch repeat, once per prompt, and where each row
    still sampling sits among its prompt's rows: `single_query_attention` reads the first `length` positions of a
    row's attention from here instead of from the row's own copy in the cache."""

    keys: list[torch.Tensor]  # per layer, (prompts, key-value heads, length, head dim)
    values: list[torch.Tensor]
    group: torch.Tensor  # (rows,): each row's prompt
    slot: torch.Tensor  # (rows,): each row's place among its prompt's rows
    slots: int  # the most rows a prompt has

    @classmethod
    def of(cls, cache: Cache, prompt_of_row: torch.Tensor, length: int) -> SharedPrompt | None:
        """Return the prompts' first `length` keys and values in `cache`, one row each (rows with the same
        `prompt_of_row`, numbered from 0, hold copies of one prefill there), or None when no two rows share one."""
        prompts = int(prompt_of_row.max()) + 1
        if prompts == len(prompt_of_row):
            return None
        firsts = torch.stack([(prompt_of_row == prompt).nonzero()[0, 0] for prompt in range(prompts)])
        keys = [layer.keys[firsts, :, :length] for layer in cache.layers]
        values = [layer.values[firsts, :, :length] for layer in cache.layers]
        return cls(keys, values, *cls.places(prompt_of_row, prompts))

    @staticmethod
    def places(prompt_of_row: torch.Tensor, prompts: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Return (group, slot, slots) of rows whose prompts are `prompt_of_row`."""
        member = torch.nn.functional.one_hot(prompt_of_row, prompts)
        slot = (member.cumsum(dim=0) * member).sum(dim=1) - 1
        return prompt_of_row, slot, int(slot.max()) + 1

    def of_rows(self, prompt_of_row: torch.Tensor) -> SharedPrompt:
        """Return the same prompts for the rows still sampling, whose prompts are `prompt_of_row`."""
        group, slot, slots = self.places(prompt_of_row, len(self.keys[0]))
        return self._replace(group=group, slot=slot, slots=slots)

    def by_group(self, rows: torch.Tensor) -> torch.Tensor:
        """Return (prompts, key-value heads, slots × query heads per group, n) from (rows, key-value heads, query
        heads per group, n): the rows of a prompt stacked, zeros where a prompt has fewer rows."""
        grouped = rows.new_zeros(len(self.keys[0]), self.slots, *rows.shape[1:])
        grouped[self.group, self.slot] = rows
        return grouped.transpose(1, 2).flatten(2, 3)

    def by_row(self, grouped: torch.Tensor, heads_per_group: int) -> torch.Tensor:
        """Return the inverse of `by_group`."""
        prompts, kv_heads, _, n = grouped.shape
        return grouped.view(prompts, kv_heads, self.slots, heads_per_group, n).transpose(1, 2)[self.group, self.slot]


def single_query_attention(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
    shared_prompt: SharedPrompt | None = None, **kwargs,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """Return transformers' sdpa attention output (batch, 1, heads, head dim) and no weights, for a single query as
    softmax(q kᵀ · scale, masked) v, with the keys and values of a prompt shared by several rows (`shared_prompt`)
    read once per prompt; anything else (longer queries, dropout, softcapping, sliding windows, sinks, position
    biases, float masks, attention weights asked for) goes to transformers' own sdpa function.

    A decode step's attention streams the whole cache from memory (~50 MB for the default batch, beyond the L3
    cache), and with 8 generations per prompt most of it is the same prompt 8 times: the rows of a group are the
    rows of one query matrix against their prompt's keys and values, each row against its own completion's. The
    query heads that share a key-value head (GQA) are rows of that matrix too, as transformers' sdpa does for one
    query, so the keys are not copied per query head. The mask is sdpa's boolean one (`sdpa_mask`, True = attend)
    or None (no padding); a decode step's query always attends to its own key, so no row is fully masked. The
    values are sdpa's up to float rounding (other summation orders).
    """
    mask_is_plain = attention_mask is None or (attention_mask.dtype == torch.bool and attention_mask.size(1) == 1)
    if (
        query.size(2) != 1
        or dropout
        or not mask_is_plain
        or kwargs.get("output_attentions")
        or any(kwargs.get(name) is not None for name in ATTENTION_EXTRAS)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)  # fmt: skip
    batch, heads, _, head_dim = query.shape
    per_group = heads // key.size(1)
    scale = head_dim**-0.5 if scaling is None else scaling
    query = (query * scale).view(batch, key.size(1), per_group, head_dim)
    layer = getattr(module, "layer_idx", None)
    if layer is None:  # the shared prompts are stored per layer; the rows' own copies are in the cache too
        shared_prompt = None
    prompt_length = 0 if shared_prompt is None else shared_prompt.keys[layer].size(-2)
    scores = torch.matmul(query, key[:, :, prompt_length:].transpose(-1, -2))
    if shared_prompt is not None:
        prompt_keys = shared_prompt.keys[layer]
        prompt_scores = torch.matmul(shared_prompt.by_group(query), prompt_keys.transpose(-1, -2))
        scores = torch.cat([shared_prompt.by_row(prompt_scores, per_group), scores], dim=-1)
    if attention_mask is not None:
        scores = torch.where(attention_mask, scores, float("-inf"))
    weights = scores.softmax(dim=-1)
    output = torch.matmul(
        weights[..., prompt_length:], value[:, :, prompt_length:]
    )  # (batch, kv heads, heads per kv head, dim)
    if shared_prompt is not None:
        prompt_output = torch.matmul(shared_prompt.by_group(weights[..., :prompt_length]), shared_prompt.values[layer])
        output = output + shared_prompt.by_row(prompt_output, per_group)
    return output.reshape(batch, 1, heads, head_dim), None


# The attention modules look their function up by the config's implementation name at every forward
# (`ALL_ATTENTION_FUNCTIONS.get_interface`), and the mask builders theirs (`ALL_MASK_ATTENTION_FUNCTIONS`; a name
# missing there gets no padding mask at all), so the function is registered under its own name in both, with
# sdpa's mask.
AttentionInterface.register(MATMUL_DECODE, single_query_attention)
AttentionMaskInterface.register(MATMUL_DECODE, sdpa_mask)


@contextlib.contextmanager
def matmul_decode_attention(model) -> Iterator[None]:
    """Run `model`'s sdpa attention through `single_query_attention` inside the block; its own implementation is
    back after it, also when the block raises. Other implementations (eager, flash, flex) stay as they are.

    The switch is transformers' public one (`set_attn_implementation` with a name registered in its attention
    interfaces, as its attention-interface guide shows), scoped to this model and this block; the model's extra
    forward inputs (`shared_prompt`) reach the attention function as keyword arguments. Overriding "sdpa" in the
    global interface would change every model's forwards in the process (the update's included), and patching
    torch's sdpa would change every caller's.
    """
    previous = model.config._attn_implementation
    if previous != "sdpa":
        yield
        return
    model.set_attn_implementation(MATMUL_DECODE)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def padded_before_the_end(mask: torch.Tensor) -> bool:
    """Return True when every row ends on a real token and has at most one run of padding: left padding, or a
    shared prefix, padding, then the row's own tokens (`packing.prefix_first`). Right padding would put the new
    tokens after padding, which generate's positions do not follow."""
    return bool(mask[:, -1].all()) and bool(((mask[:, :-1] > mask[:, 1:]).sum(dim=1) <= 1).all())


def common_columns(tokens: torch.Tensor) -> int:
    """Return how many leading columns hold the same token in every row (padding written as -1 never counts)."""
    same = (tokens == tokens[:1]).all(dim=0) & (tokens[0] >= 0)
    return len(same) if same.all() else int((~same).int().argmax())


def _loop_applies(model_kwargs: dict, logits_processor, stopping_criteria, generation_config, streamer,
                  same_draws: bool) -> bool:  # fmt: skip
    """Return True when `sample_unfinished_rows` reproduces what generate's own sampling loop would do."""
    mask = model_kwargs.get("attention_mask")
    cache = model_kwargs.get(CACHE_KEYWORD)
    return (
        generation_config.get_generation_mode() in (GenerationMode.SAMPLE, GenerationMode.GREEDY_SEARCH)
        and not generation_config.return_dict_in_generate
        and set(model_kwargs) <= MODEL_INPUTS
        and model_kwargs.get("use_cache") is not False
        and (mask is None or padded_before_the_end(mask))  # positions follow from the mask
        and isinstance(cache, Cache)
        and all(type(layer) in (DynamicLayer, PreallocatedLayer) for layer in cache.layers)  # rows selectable
        and all(type(processor) in ROW_WISE_PROCESSORS for processor in logits_processor)
        and all(type(criterion) in (EosTokenCriteria, MaxLengthCriteria) for criterion in stopping_criteria)
        and any(type(criterion) is MaxLengthCriteria for criterion in stopping_criteria)
        and (
            generation_config.get_generation_mode() == GenerationMode.GREEDY_SEARCH
            or not same_draws
            or draws_like_multinomial()
        )
    )


def sample_unfinished_rows(
    model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, streamer=None,
    same_draws: bool = True, **model_kwargs,
):  # fmt: skip
    """Return what `generate` returns for multinomial sampling or greedy decoding: `input_ids` followed by the
    chosen tokens, rows that ended early padded; runs the forwards of each step on the rows still decoding only.

    With `same_draws` a sampled token is the one generate's multinomial draws from the same random numbers
    (`draw_like_multinomial`); without, it comes from the same distribution by one uniform number per row
    (`draw_by_inverse_cdf`), much cheaper for a large vocabulary. A `custom_generate` decoding method for
    `GenerationMixin.generate`; where it cannot reproduce generate's loop (`_loop_applies`), runs that loop instead.
    """
    if synced_gpus or not _loop_applies(
        model_kwargs, logits_processor, stopping_criteria, generation_config, streamer, same_draws
    ):
        own_loop = getattr(type(model), GENERATION_MODES_MAPPING[generation_config.get_generation_mode()])
        return own_loop(
            model, input_ids, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
            generation_config=generation_config, synced_gpus=synced_gpus, streamer=streamer, **model_kwargs,
        )  # fmt: skip
    cache, mask = model_kwargs[CACHE_KEYWORD], model_kwargs.get("attention_mask")
    if mask is None:  # generate drops a mask of ones (transformers 5.25): no row is padded
        mask = torch.ones_like(input_ids)
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
    greedy = generation_config.get_generation_mode() == GenerationMode.GREEDY_SEARCH
    past = cache.get_seq_length()
    rows = torch.arange(batch, device=input_ids.device)  # the original rows in the batch
    live = torch.ones(batch, dtype=torch.bool, device=input_ids.device)  # which of them are still sampling
    tokens, position_ids, length = input_ids[:, past:], positions[:, past:], width
    shared = prompt_of_row = None
    if past:  # rows with the same prompt hold copies of one prefill in the first `past` cache positions
        prompts = input_ids[:, :past].masked_fill(mask[:, :past] == 0, -1)
        prompt_of_row = torch.unique(prompts, dim=0, return_inverse=True)[1]
        shared = SharedPrompt.of(cache, prompt_of_row, past)
        prefix = common_columns(prompts)
        if shared is None and prefix:  # distinct prompts that start alike (`packing.prefix_first`): one group
            prompt_of_row = torch.zeros_like(prompt_of_row)
            shared = SharedPrompt.of(cache, prompt_of_row, prefix)
    with matmul_decode_attention(model):
        for _ in range(steps):
            logits = model(
                input_ids=tokens, attention_mask=attention[rows, :length], position_ids=position_ids,
                **{CACHE_KEYWORD: cache}, use_cache=True, logits_to_keep=1, shared_prompt=shared,
            ).logits[:, -1].to(copy=True, dtype=torch.float32)  # fmt: skip
            scores = logits_processor(sequences[rows, :length], logits)
            if greedy:
                tokens = scores.argmax(-1)
            elif same_draws:
                tokens = draw_like_multinomial(torch.softmax(scores, dim=-1), rows, batch)
            else:
                tokens = draw_by_inverse_cdf(torch.softmax(scores, dim=-1))
            sequences[rows[live], length] = tokens[live]  # an ended row keeps the padding after its end
            if streamer is not None:  # every row's token of this step, as generate's loop streams them
                streamer.put(sequences[:, length].cpu())
            length += 1
            if end_tokens is not None:
                live &= ~torch.isin(tokens, end_tokens)
            ended = int((~live).sum())
            if ended == len(rows):
                break
            if ended * LEAVE_AT >= len(rows):  # ended rows leave in bulk: each leaving copies the cache
                kept = live.nonzero().flatten()
                rows, tokens, live = rows[kept], tokens[kept], live[kept]
                cache.batch_select_indices(kept)
                shared = None if shared is None else shared.of_rows(prompt_of_row[rows])
            tokens, position_ids = tokens[:, None], positions[rows, -1:] + (length - width)
    if streamer is not None:
        streamer.end()
    return sequences[:, :length]
