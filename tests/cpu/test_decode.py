"""The CPU fast path's sampling loop (lopti/cpu/decode.py) against HF generate, token for token."""

import functools
import inspect
import types

import pytest
import torch
from transformers import AttentionInterface, AutoModelForCausalLM, GenerationConfig, Qwen2Config, Qwen2ForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from lopti.cpu import decode, packing
from lopti.cpu.decode import MATMUL_DECODE, SharedPrompt, single_query_attention
from lopti.cpu.draws import draw_by_inverse_cdf, draws_like_multinomial
from lopti.cpu.packing import shared_prefill_generate

MANY_ENDS = list(range(3, 30))  # end-of-sequence tokens common enough that rows end at different steps


def left_padded(vocab: int, prompt_lengths: list[int], group: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (ids, mask): each random prompt `group` times in a row, left-padded to the longest."""
    generator = torch.Generator().manual_seed(seed)
    width = max(prompt_lengths)
    ids = torch.zeros(len(prompt_lengths) * group, width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for index, length in enumerate(prompt_lengths):
        rows = slice(index * group, (index + 1) * group)
        ids[rows, width - length :] = torch.randint(3, vocab, (length,), generator=generator)
        mask[rows, width - length :] = 1
    return ids, mask


def sample(generate, model, ids, mask, config, seed):
    """Return (sequences, rows of each forward, random state after) of one seeded call."""
    rows = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: rows.append(len(kwargs["input_ids"])),
                                           with_kwargs=True)  # fmt: skip
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            sequences = generate(model, input_ids=ids, attention_mask=mask, generation_config=config)
    finally:
        hook.remove()
    return sequences, rows, torch.get_rng_state()


SETTINGS = {
    # rows end at different steps inside the budget
    "ends-inside": dict(max_new_tokens=24, temperature=1.0, top_k=0, eos_token_id=MANY_ENDS),
    # no end-of-sequence token: every row runs the whole budget
    "no-end": dict(max_new_tokens=6, temperature=1.0, top_k=0, eos_token_id=None),
    # the processors of TRL's sampling settings that the loop runs (the repetition penalty runs generate's loop)
    "trl-processors": dict(max_new_tokens=24, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, eos_token_id=MANY_ENDS),
}


def both_ways(model, seed: int, lengths=(9, 14, 5), group: int = 4):
    """Return ((sequences, forward rows, random state) of generate, the same of the fast path, the prompts' ids)
    for one seeded "ends-inside" sampling of `lengths` prompts, each `group` times."""
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    ids, mask = left_padded(model.config.vocab_size, list(lengths), group, seed)
    expected = sample(type(model).generate, model, ids, mask, config, seed)
    return expected, sample(shared_prefill_generate, model, ids, mask, config, seed), ids


@pytest.mark.parametrize(
    "lengths, group",
    [([9, 14, 5], 4), ([9, 14, 5, 7, 11, 3, 12, 6, 10, 8, 13, 4], 1)],
    ids=["repeated-prompts", "distinct-prompts"],
)
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_fast_rollout_samples_what_generate_samples(tiny_model_dir, name, lengths, group):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None  # the setting's own ends only
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS[name])
    assert draws_like_multinomial()
    for seed in range(3):
        ids, mask = left_padded(model.config.vocab_size, lengths, group, seed)
        expected, generate_rows, generate_state = sample(type(model).generate, model, ids, mask, config, seed)
        ours, our_rows, our_state = sample(shared_prefill_generate, model, ids, mask, config, seed)
        assert torch.equal(ours, expected)  # the same tokens, the ended rows padded the same way
        assert torch.equal(our_state, generate_state)  # from the same random numbers, none more
        completions = expected[:, ids.size(1) :]
        is_end = torch.isin(completions, torch.tensor(config.eos_token_id or [-1]))
        ended, steps = is_end.any(dim=1), completions.size(1)
        sampled = torch.where(ended, is_end.int().argmax(dim=1) + 1, steps)  # tokens up to each row's end
        if name == "no-end":
            assert not ended.any() and steps == config.max_new_tokens
            assert our_rows[-steps:] == [len(ids)] * steps
        else:
            assert 0 < int(ended.sum()) < len(ids)  # the case this setting is for
            # the ended rows leave the batch: one row-forward per token sampled, generate's one per row and step
            assert sum(our_rows[-steps:]) == int(sampled.sum()) < sum(generate_rows[-steps:]) == len(ids) * steps
        prefill = [len(torch.unique(ids, dim=0))] if group > 1 else []
        assert our_rows[: len(our_rows) - steps] == prefill  # each distinct prompt's prefill once


def test_ended_rows_left_in_the_batch_until_they_leave_together_change_no_token(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(decode, "LEAVE_AT", 2)  # ended rows leave once they are half the batch
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    (expected, _, generate_state), (ours, our_rows, our_state), ids = both_ways(model, seed=0)
    assert torch.equal(ours, expected) and torch.equal(our_state, generate_state)
    completions = expected[:, ids.size(1) :]
    is_end = torch.isin(completions, torch.tensor(MANY_ENDS))
    sampled = int(torch.where(is_end.any(dim=1), is_end.int().argmax(dim=1) + 1, completions.size(1)).sum())
    forwards = sum(our_rows[1:])  # after the prefill
    # ended rows ran a few more forwards (fewer than half of each step's rows), and left before the end
    assert sampled < forwards < 2 * sampled and forwards < len(ids) * completions.size(1)


def test_prompts_of_one_length_run_the_loop_though_generate_drops_their_mask_of_ones(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    (expected, _, generate_state), (ours, our_rows, our_state), _ = both_ways(model, seed=1, lengths=(9, 9, 9))
    assert torch.equal(ours, expected) and torch.equal(our_state, generate_state)
    assert our_rows[-1] < 12  # ended rows left the batch: the loop ran, not generate's own


def test_the_cache_is_preallocated_for_a_budget_given_as_an_argument(tiny_model_dir, monkeypatch):
    capacities = []

    def recording(model, capacity):
        capacities.append(capacity)
        return decode.sampling_cache(model, capacity)

    monkeypatch.setattr(packing, "sampling_cache", recording)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 1, seed=0)
    with torch.no_grad():  # as lopti's evaluation calls it: the budget beside the model's own generation config
        shared_prefill_generate(model, input_ids=ids, attention_mask=mask, max_new_tokens=7, do_sample=False,
                                pad_token_id=0)  # fmt: skip
    assert capacities == [ids.size(1) + 7]


@pytest.mark.parametrize("group", [4, 1], ids=["repeated-prompts", "distinct-prompts"])
def test_greedy_decoding_gives_generates_tokens_with_ended_rows_left_out(tiny_model_dir, group):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], group, seed=0)
    free = GenerationConfig(do_sample=False, pad_token_id=0, max_new_tokens=24, eos_token_id=None)
    completions = sample(type(model).generate, model, ids, mask, free, seed=0)[0][:, ids.size(1) :]
    # end tokens that some rows write early and others never: rows then end at different steps
    ends = [t for t in completions[0, :6].tolist() if not bool((completions == t).any(dim=1).all())]
    assert ends, "the random model's greedy rows all write the same tokens"
    config = GenerationConfig(do_sample=False, pad_token_id=0, max_new_tokens=24, eos_token_id=ends)
    expected, generate_rows, _ = sample(type(model).generate, model, ids, mask, config, seed=0)
    ours, our_rows, _ = sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    assert torch.equal(ours, expected)
    steps = expected.size(1) - ids.size(1)
    assert sum(our_rows[-steps:]) < sum(generate_rows[-steps:])  # rows that ended did no more forwards


@pytest.mark.parametrize("setting", [dict(repetition_penalty=1.3), dict(no_repeat_ngram_size=2)])
def test_settings_the_loop_does_not_reproduce_run_generates_loop(tiny_model_dir, setting):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    config = GenerationConfig(do_sample=True, pad_token_id=0, max_new_tokens=16, top_k=0, eos_token_id=MANY_ENDS,
                              **setting)  # fmt: skip
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 4, seed=0)
    expected, _, _ = sample(type(model).generate, model, ids, mask, config, seed=0)
    ours, our_rows, _ = sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    assert torch.equal(ours, expected)
    steps = expected.size(1) - ids.size(1)
    assert our_rows == [3] + [len(ids)] * steps  # shared prefill, then generate's loop over every row


def gqa_model(vocab: int) -> Qwen2ForCausalLM:
    """Return a random two-layer model whose 4 query heads share 2 key-value heads (grouped-query attention)."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


def test_fast_rollout_samples_what_generate_samples_with_grouped_query_attention(tiny_model_dir):
    vocab = AutoModelForCausalLM.from_pretrained(tiny_model_dir).config.vocab_size
    model = gqa_model(vocab)
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    ids, mask = left_padded(vocab, [9, 14, 5], 4, seed=0)
    expected, _, _ = sample(type(model).generate, model, ids, mask, config, seed=0)
    ours, _, _ = sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("key_value_heads", [4, 2, 1])
@pytest.mark.parametrize("padded", [True, False])
def test_single_query_attention_matches_sdpa(key_value_heads, padded):
    generator = torch.Generator().manual_seed(key_value_heads)
    module = types.SimpleNamespace(num_key_value_groups=4 // key_value_heads, is_causal=True)
    query = torch.randn(6, 4, 1, 16, generator=generator)
    key, value = (torch.randn(6, key_value_heads, 11, 16, generator=generator) for _ in range(2))
    mask = None
    if padded:
        mask = torch.ones(6, 1, 1, 11, dtype=torch.bool)
        mask[:3, ..., :4] = False  # left padding of the first rows
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    ours, weights = single_query_attention(module, query, key, value, mask, scaling=0.3)
    assert ours.shape == expected.shape == (6, 1, 4, 16) and weights is None
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    changed = torch.cat([key[:3, :, :4] + 100.0, key[:3, :, 4:]], dim=2)  # the padded keys must not count
    if padded:
        shifted, _ = single_query_attention(module, query[:3], changed, value[:3], mask[:3], scaling=0.3)
        torch.testing.assert_close(shifted, ours[:3], rtol=0, atol=1e-6)


@pytest.mark.parametrize("key_value_heads", [4, 2])
def test_single_query_attention_reads_a_shared_prompt_once_per_group(key_value_heads):
    generator = torch.Generator().manual_seed(key_value_heads)
    module = types.SimpleNamespace(num_key_value_groups=4 // key_value_heads, is_causal=True, layer_idx=0)
    prompt_of_row = torch.tensor([2, 0, 2, 1, 0, 2, 2])  # groups of 4, 2 and 1 rows, not contiguous
    query = torch.randn(7, 4, 1, 16, generator=generator)
    key, value = (torch.randn(7, key_value_heads, 13, 16, generator=generator) for _ in range(2))
    prompt_keys, prompt_values = (torch.randn(3, key_value_heads, 9, 16, generator=generator) for _ in range(2))
    key[:, :, :9], value[:, :, :9] = prompt_keys[prompt_of_row], prompt_values[prompt_of_row]
    mask = torch.ones(7, 1, 1, 13, dtype=torch.bool)
    mask[prompt_of_row == 2, ..., :3] = False  # the longest group's prompt is left-padded
    cache = types.SimpleNamespace(layers=[types.SimpleNamespace(keys=key, values=value)])
    shared = SharedPrompt.of(cache, prompt_of_row, 9)
    assert shared.slots == 4 and shared.slot.tolist() == [0, 0, 1, 0, 1, 2, 3]
    torch.testing.assert_close(shared.keys[0], prompt_keys, rtol=0, atol=0)  # each prompt once
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    ours, _ = single_query_attention(module, query, key, value, mask, scaling=0.25, shared_prompt=shared)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    key[:, :, :9], value[:, :, :9] = 100.0, 100.0  # the rows' own copies of their prompt are not read
    again, _ = single_query_attention(module, query, key, value, mask, scaling=0.25, shared_prompt=shared)
    torch.testing.assert_close(again, expected, rtol=0, atol=1e-6)
    kept = torch.tensor([0, 2, 4, 5])  # rows leave: prompt 1 has none left, prompt 2 three
    fewer = shared.of_rows(prompt_of_row[kept])
    assert fewer.slots == 3 and fewer.slot.tolist() == [0, 1, 0, 2]
    key[:, :, :9], value[:, :, :9] = prompt_keys[prompt_of_row], prompt_values[prompt_of_row]
    expected, _ = sdpa_attention_forward(module, query[kept], key[kept], value[kept], mask[kept], scaling=0.25)
    ours, _ = single_query_attention(module, query[kept], key[kept], value[kept], mask[kept], scaling=0.25,
                                     shared_prompt=fewer)  # fmt: skip
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)


def test_no_shared_prompt_without_repeated_prompts():
    cache = types.SimpleNamespace(layers=[types.SimpleNamespace(keys=torch.zeros(4, 1, 9, 2), values=None)])
    assert SharedPrompt.of(cache, torch.tensor([3, 0, 1, 2]), 9) is None


def test_single_query_attention_leaves_longer_queries_to_sdpa():
    module = types.SimpleNamespace(num_key_value_groups=1, is_causal=True)
    query, key, value = (torch.randn(2, 2, 5, 8) for _ in range(3))
    expected, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.5)
    ours, _ = single_query_attention(module, query, key, value, None, scaling=0.5)
    assert torch.equal(ours, expected)


def counting_attention(monkeypatch) -> dict:
    """Count the query lengths the decode attention sees, and those it hands to sdpa, in the returned dict."""
    seen = {"matmul": [], "sdpa": [], "shared": []}

    def counted(module, query, *args, **kwargs):
        seen["matmul"].append(query.size(2))
        shared = kwargs.get("shared_prompt")
        seen["shared"].append(
            None if shared is None else (shared.keys[0].size(-2), len(shared.keys[0]), len(shared.group))
        )
        return single_query_attention(module, query, *args, **kwargs)

    def counted_sdpa(module, query, *args, **kwargs):
        seen["sdpa"].append(query.size(2))
        return sdpa_attention_forward(module, query, *args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, MATMUL_DECODE, counted)
    monkeypatch.setattr(decode, "sdpa_attention_forward", counted_sdpa)
    return seen


def test_decode_steps_run_the_matmul_attention_and_the_model_gets_sdpa_back(tiny_model_dir, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    assert model.config._attn_implementation == "sdpa"
    seen = counting_attention(monkeypatch)
    implementations = []
    model.register_forward_pre_hook(lambda module, args: implementations.append(module.config._attn_implementation))
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5, 7], 1, seed=0)  # distinct: the loop's prefill
    _, rows, _ = sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    layers, steps = model.config.num_hidden_layers, len(rows)
    assert implementations == [MATMUL_DECODE] * steps  # every forward of the loop
    assert seen["matmul"] == [ids.size(1)] * layers + [1] * layers * (steps - 1)
    assert seen["sdpa"] == [ids.size(1)] * layers  # only the prompt's forward goes to sdpa
    assert seen["shared"] == [None] * len(seen["matmul"])  # distinct prompts: nothing shared
    assert model.config._attn_implementation == "sdpa"
    for layer in model.model.layers:
        assert layer.self_attn.config._attn_implementation == "sdpa"


def test_decode_steps_of_repeated_prompts_read_each_prompt_once(tiny_model_dir, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    seen = counting_attention(monkeypatch)
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 4, seed=0)
    _, rows, _ = sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    layers = model.config.num_hidden_layers
    assert seen["sdpa"] == []  # the shared prefill ran before the loop, on the model's own sdpa
    step_rows = rows[1:]  # the loop's forwards, one token each
    assert seen["matmul"] == [1] * layers * len(step_rows)
    # every step reads the prefilled prompt (all but its last token) from one row per prompt still sampling
    assert [(length, batch) for length, _, batch in seen["shared"][::layers]] == [
        (ids.size(1) - 1, batch) for batch in step_rows
    ]
    assert all(prompts == 3 for _, prompts, _ in seen["shared"])


def test_the_model_gets_sdpa_back_when_the_loop_raises(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    implementations = []

    def fail_on_third_forward(module, args):
        implementations.append(module.config._attn_implementation)
        if len(implementations) == 3:
            raise RuntimeError("forward failed")

    model.register_forward_pre_hook(fail_on_third_forward)
    config = GenerationConfig(do_sample=True, pad_token_id=0, max_new_tokens=8, top_k=0, eos_token_id=None)
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 2, seed=0)
    with pytest.raises(RuntimeError, match="forward failed"):
        sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    assert implementations[1:] == [MATMUL_DECODE] * 2  # after the shared prefill, the loop's forwards
    assert model.config._attn_implementation == "sdpa"


class Preallocated(Exception):
    """Raised in place of sampling once the cache's size is known."""


@pytest.mark.parametrize("budget", [10**9, 600])
def test_the_cache_preallocates_no_more_than_the_model_attends_to(tiny_model_dir, monkeypatch, budget):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.config.max_position_embeddings = 512
    sizes = []

    def sampling_cache(model, capacity):
        sizes.append(capacity)
        raise Preallocated

    monkeypatch.setattr(packing, "sampling_cache", sampling_cache)
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 4, seed=0)
    config = GenerationConfig(do_sample=False, pad_token_id=0, max_new_tokens=budget)
    with pytest.raises(Preallocated):
        sample(shared_prefill_generate, model, ids, mask, config, seed=0)
    assert sizes == [512]  # not 14 + 10⁹ positions (terabytes for this batch)


def test_a_generation_longer_than_the_preallocated_cache_grows_it_and_samples_what_generate_samples(
    tiny_model_dir, monkeypatch
):
    monkeypatch.setattr(packing, "PREALLOCATED_STEPS", 3)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    (expected, _, _), (ours, _, _), _ = both_ways(model, seed=1)
    assert torch.equal(ours, expected)


def with_shared_start(ids: torch.Tensor, mask: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (ids, mask) of the same left-padded prompts, each opening with the tokens `start`."""
    width = ids.size(1) + len(start)
    out_ids, out_mask = torch.zeros(len(ids), width, dtype=ids.dtype), torch.zeros(len(ids), width, dtype=mask.dtype)
    for row in range(len(ids)):
        real = ids[row, mask[row] == 1]
        full = torch.cat([start, real])
        out_ids[row, width - len(full) :], out_mask[row, width - len(full) :] = full, 1
    return out_ids, out_mask


@pytest.mark.parametrize("group", [1, 4], ids=["distinct-prompts", "repeated-prompts"])
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_prompts_with_a_shared_start_prefill_it_once_and_decode_what_generate_decodes(tiny_model_dir, group,
                                                                                      do_sample):  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    settings = SETTINGS["ends-inside"] if do_sample else dict(max_new_tokens=12, eos_token_id=MANY_ENDS)
    config = GenerationConfig(do_sample=do_sample, pad_token_id=0, **settings)
    start = torch.randint(3, model.config.vocab_size, (packing.SHARED_PREFIX_MIN + 5,),
                          generator=torch.Generator().manual_seed(7))  # fmt: skip
    lengths = [9, 14, 5, 7, 11, 3] if group == 1 else [9, 14, 5]
    ids, mask = with_shared_start(*left_padded(model.config.vocab_size, lengths, group, seed=1), start)
    assert packing.shared_prefix_length(ids, mask) == len(start)
    expected, _, generate_state = sample(type(model).generate, model, ids, mask, config, seed=1)
    ours, our_rows, our_state = sample(shared_prefill_generate, model, ids, mask, config, seed=1)
    width = ids.size(1)
    assert torch.equal(ours[:, width:], expected[:, width:])  # the same completions
    assert torch.equal(our_state, generate_state)
    # the returned prompts hold the shared start first, then each row's padding and its own tokens
    assert torch.equal(ours[:, : len(start)], start.expand(len(ids), -1))
    for row in range(len(ids)):
        assert torch.equal(ours[row, :width][ours[row, :width] != 0], ids[row][mask[row] == 1])
    # the start's prefill once, then each distinct prompt's rest once, then the sampling steps
    assert our_rows[:2] == [1, len(torch.unique(ids, dim=0))]


def test_a_short_shared_start_is_prefilled_with_each_prompt():
    ids = torch.tensor([[0, 5, 6, 7, 8], [5, 6, 7, 9, 9]])
    mask = (ids != 0).long()
    assert packing.shared_prefix_length(ids, mask) == 3
    moved_ids, moved_mask = packing.prefix_first(ids, mask, 3)
    assert moved_ids.tolist() == [[5, 6, 7, 0, 8], [5, 6, 7, 9, 9]]
    assert moved_mask.tolist() == [[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]]
    assert decode.padded_before_the_end(moved_mask) and not decode.padded_before_the_end(torch.tensor([[1, 0]]))
    assert packing.shared_prefix_length(ids[:1], mask[:1]) == 0  # one row shares with nobody


def test_inverse_cdf_draws_follow_the_probabilities_and_never_a_zero_one():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]]).repeat(20_000, 1)
    torch.manual_seed(0)
    tokens = draw_by_inverse_cdf(probs).view(20_000, 2)
    shares = torch.bincount(tokens[:, 0], minlength=4) / 20_000
    assert torch.allclose(shares, torch.tensor([0.5, 0.0, 0.3, 0.2]), atol=0.015)  # 4.5 standard errors
    assert (tokens[:, 1] == 3).all()


def test_sampling_by_inverse_cdf_keeps_the_loop_and_with_top_k_1_decodes_greedily(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5], 4, seed=2)
    greedy = GenerationConfig(do_sample=False, pad_token_id=0, max_new_tokens=24, eos_token_id=MANY_ENDS)
    expected, _, _ = sample(type(model).generate, model, ids, mask, greedy, seed=2)
    cheap = functools.partial(shared_prefill_generate, same_draws=False)
    top_1 = GenerationConfig(do_sample=True, top_k=1, pad_token_id=0, max_new_tokens=24, eos_token_id=MANY_ENDS)
    ours, our_rows, _ = sample(cheap, model, ids, mask, top_1, seed=2)
    assert torch.equal(ours, expected)
    assert our_rows[0] == 3  # the distinct prompts' prefill, then the sampling loop
    sampled = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    first, _, _ = sample(cheap, model, ids, mask, sampled, seed=5)
    again, _, _ = sample(cheap, model, ids, mask, sampled, seed=5)
    assert torch.equal(first, again) and not torch.equal(first, sample(cheap, model, ids, mask, sampled, seed=6)[0])


def test_the_cache_keyword_is_the_one_the_models_take():
    """The prefill and the loop pass the KV cache by the name this transformers' models take (`cache` in newer ones,
    `past_key_values` in older ones), so the fast path runs on every transformers lopti allows."""
    assert decode.CACHE_KEYWORD in inspect.signature(Qwen2ForCausalLM.forward).parameters


class Recorder:
    """A generate streamer that keeps what it is given."""

    def __init__(self) -> None:
        self.columns: list[torch.Tensor] = []
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        self.columns.append(value.clone())

    def end(self) -> None:
        self.ended = True


def test_a_streamer_gets_the_tokens_generate_streams_and_the_loop_still_runs(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.generation_config.eos_token_id = None
    config = GenerationConfig(do_sample=True, pad_token_id=0, **SETTINGS["ends-inside"])
    ids, mask = left_padded(model.config.vocab_size, [9, 14, 5, 7, 11, 3], 1, seed=2)
    streamed = {}
    for name, generate in {"generate": type(model).generate, "fast": shared_prefill_generate}.items():
        recorder = Recorder()
        streaming = functools.partial(generate, streamer=recorder)
        streamed[name] = (*sample(streaming, model, ids, mask, config, seed=2), recorder)
    (expected, _, _, by_generate), (sequences, rows, _, by_loop) = streamed["generate"], streamed["fast"]
    assert torch.equal(sequences, expected) and rows[-1] < len(ids)  # the loop ran: ended rows left the batch
    assert by_generate.ended and by_loop.ended
    steps = zip(by_loop.columns[1:], by_generate.columns[1:], strict=True)  # after the prompts: each step's tokens
    assert all(torch.equal(ours, theirs) for ours, theirs in steps)
