"""The CPU fast path's sampling loop (lopti/train/decode.py) against HF generate, token for token."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from lopti.train.decode import draws_like_multinomial
from lopti.train.packing import shared_prefill_generate

MANY_ENDS = list(range(3, 60))  # end-of-sequence tokens common enough that rows end at different steps


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
