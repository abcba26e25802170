import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lopti.core import (
    isolate_advantages,
    lopti_phase,
    low_prob_mask,
    phase_masks,
    quantile_eta,
    random_phase_masks,
    split_seed,
)


def test_low_mask_is_strict():
    old = torch.log(torch.tensor([[0.1, 0.5, 0.49, 0.9]]))
    mask = torch.ones(1, 4)
    assert low_prob_mask(old, mask, 0.5).tolist() == [[True, False, True, False]]


def test_padding_is_never_low_or_high():
    old = torch.log(torch.tensor([[0.1, 0.9, 0.1]]))
    mask = torch.tensor([[1, 1, 0]])
    low, high = phase_masks(old, mask, 0.5)
    assert low.tolist() == [[True, False, False]]
    assert high.tolist() == [[False, True, False]]


def random_batch(seed: int, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return random π_old log-probs and a response mask of about 70% tokens (never empty)."""
    generator = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(rows, width, generator=generator).clamp(min=1e-6))
    mask = torch.rand(rows, width, generator=generator) > 0.3
    mask[0, 0] = True
    return old, mask


# a batch's seed, a threshold and an order
SPLIT_CASES = dict(
    seed=st.integers(0, 10_000), eta=st.floats(0.01, 0.99), order=st.sampled_from(["low_first", "high_first"])
)


@settings(max_examples=60, deadline=None)
@given(**SPLIT_CASES)
def test_phase_masks_partition_valid_tokens(seed, eta, order):
    old, mask = random_batch(seed, 6, 9)
    first, second = phase_masks(old, mask, eta, order)
    assert not (first & second).any()
    assert torch.equal(first | second, mask)
    low = first if order == "low_first" else second
    assert torch.all(old[low].exp() < eta)
    assert torch.all(old[mask & ~low].exp() >= eta - 1e-6)


def test_high_first_swaps_the_order():
    old = torch.log(torch.tensor([[0.2, 0.8]]))
    mask = torch.ones(1, 2)
    low, high = phase_masks(old, mask, 0.5, "low_first")
    first, second = phase_masks(old, mask, 0.5, "high_first")
    assert torch.equal(first, high)
    assert torch.equal(second, low)


def test_quantile_eta_splits_at_the_quantile():
    probs = torch.linspace(0.01, 0.99, 100).view(4, 25)
    mask = torch.ones(4, 25)
    eta = quantile_eta(probs.log(), mask, 0.25)
    share = low_prob_mask(probs.log(), mask, eta).float().mean()
    assert abs(share.item() - 0.25) <= 0.01


def test_lopti_phase_schedule():
    # 3 micro-steps per pass: 0 0 0 1 1 1 | 0 0 0 1 1 1
    assert [lopti_phase(s, 3) for s in range(12)] == [0, 0, 0, 1, 1, 1] * 2


def test_isolate_advantages_zeroes_outside_group():
    adv = torch.tensor([[1.0, -2.0, 3.0]])
    torch.testing.assert_close(
        isolate_advantages(adv, torch.tensor([[True, False, True]])), torch.tensor([[1.0, 0.0, 3.0]])
    )


@pytest.mark.parametrize("eta", [0.0, 1.0, -0.5, 2.0])
def test_eta_outside_open_interval(eta):
    with pytest.raises(ValueError, match="eta must be in \\(0, 1\\)"):
        low_prob_mask(torch.zeros(1, 2), torch.ones(1, 2), eta)


def test_bad_order_and_all_padding():
    with pytest.raises(ValueError, match="order must be one of"):
        phase_masks(torch.zeros(1, 2), torch.ones(1, 2), 0.5, "random")
    with pytest.raises(ValueError, match="response_mask selects no token"):
        phase_masks(torch.zeros(1, 2), torch.zeros(1, 2), 0.5)
    with pytest.raises(ValueError, match="micro_steps_per_pass must be"):
        lopti_phase(0, 0)


def test_eta_threshold_is_exact_in_log_space():
    old = torch.tensor([[math.log(0.5)]])
    assert not low_prob_mask(old, torch.ones(1, 1), 0.5).any()


@settings(max_examples=40, deadline=None)
@given(**SPLIT_CASES)
def test_random_split_keeps_the_probability_splits_sizes_on_the_response_tokens(seed, eta, order):
    old, mask = random_batch(seed, 5, 11)
    first, second = random_phase_masks(old, mask, seed, eta, order)
    by_probability = phase_masks(old, mask, eta, order)[0]
    assert int(first.sum()) == int(by_probability.sum())
    assert not (first & second).any() and torch.equal(first | second, mask)
    assert first.dtype == torch.bool and first.shape == mask.shape
    again = random_phase_masks(old, mask, seed, eta, order)
    assert torch.equal(again[0], first) and torch.equal(again[1], second)


def test_random_split_is_not_the_probability_split_and_changes_with_the_seed():
    # 40 tokens, π_old rising from 0.01 to 0.99: 20 lie below η = 0.5, all in the first half of each row
    old = torch.linspace(0.01, 0.99, 40).log().view(2, 20).T.contiguous()
    mask = torch.ones(20, 2)
    low = phase_masks(old, mask, 0.5)[0]
    draws = [random_phase_masks(old, mask, seed, 0.5)[0] for seed in range(5)]
    assert all(int(draw.sum()) == int(low.sum()) == 20 for draw in draws)
    assert all(not torch.equal(draw, low) for draw in draws)
    assert all(draw.float().mean(0).min() > 0.2 for draw in draws)  # high tokens are drawn too
    assert len({tuple(draw.flatten().tolist()) for draw in draws}) == 5
    # padding is never drawn, and a split with nothing below η draws nothing
    padded = mask.clone()
    padded[10:] = 0
    first, _ = random_phase_masks(old, padded, 0, 0.5)
    assert not first[10:].any() and int(first.sum()) == int(phase_masks(old, padded, 0.5)[0].sum())
    assert not random_phase_masks(old, mask, 0, 0.005)[0].any()


def test_split_seed_depends_on_every_key():
    seeds = {split_seed(run, step, slot) for run in (0, 1) for step in (0, 1) for slot in (0, 1)}
    assert len(seeds) == 8 and split_seed(0, 1, 0) == split_seed(0, 1, 0)
    assert all(0 <= seed < 2**63 for seed in seeds)
