import pytest
import torch

from lopti.core import (
    dr_grpo_advantages,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    token_advantages,
)


def test_grpo_hand_computed():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3); group [3, 3, 3, 3]: std 0 → advantages 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 3.0, 3.0])
    adv = grpo_advantages(rewards, group_size=4)
    expected = 0.5 / (3**-0.5 + 1e-6)
    torch.testing.assert_close(adv[:4], torch.tensor([expected, -expected, -expected, expected]))
    assert torch.equal(adv[4:], torch.zeros(4))


def test_singleton_groups_use_mean_zero_and_std_one_like_the_authors():
    rewards = torch.tensor([3.0, -1.0, 0.5], dtype=torch.float64)
    # the authors' (r − 0) / (1 + 1e-6): 3 becomes 2.999997000003, not 3
    expected = torch.tensor([3 / 1.000001, -1 / 1.000001, 0.5 / 1.000001], dtype=torch.float64)
    torch.testing.assert_close(grpo_advantages(rewards, 1), expected, rtol=1e-15, atol=0)
    assert torch.equal(dr_grpo_advantages(rewards, 1), rewards)
    assert torch.equal(rloo_advantages(rewards, 1), rewards)


def test_dr_grpo_and_rloo_hand_computed():
    rewards = torch.tensor([3.0, 0.0, 0.0])
    torch.testing.assert_close(dr_grpo_advantages(rewards, 3), torch.tensor([2.0, -1.0, -1.0]))
    # leave-one-out baselines: 0, 1.5, 1.5
    torch.testing.assert_close(rloo_advantages(rewards, 3), torch.tensor([3.0, -1.5, -1.5]))


def test_reinforce_pp_whitens_over_valid_tokens_only():
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv = reinforce_pp_advantages(rewards, mask)
    # valid returns: 1, 1, 1, 0 → mean 0.75, unbiased var 0.25
    expected_pos = 0.25 / (0.25 + 1e-8) ** 0.5
    expected_neg = -0.75 / (0.25 + 1e-8) ** 0.5
    torch.testing.assert_close(adv, torch.tensor([[expected_pos] * 3, [expected_neg, 0.0, 0.0]]))
    assert adv[mask.bool()].mean().abs() < 1e-6


def test_reinforce_pp_baseline_removes_group_mean_first():
    rewards = torch.tensor([5.0, 5.0, 1.0, 3.0])
    mask = torch.ones(4, 2)
    adv = reinforce_pp_baseline_advantages(rewards, 2, mask)
    # centered: 0, 0, -1, 1 → whitened over 8 tokens, mean 0, unbiased var 4/7
    scale = (4 / 7 + 1e-8) ** -0.5
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.0, 0.0, -scale, scale]))


def test_masked_whiten_matches_plain_whitening():
    values = torch.randn(4, 5)
    mask = torch.ones(4, 5, dtype=torch.bool)
    expected = (values - values.mean()) / (values.var() + 1e-8).sqrt()
    torch.testing.assert_close(masked_whiten(values, mask), expected)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_token_advantages_zero_on_padding(estimator):
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    adv = token_advantages(rewards, mask, group_size=2, estimator=estimator)
    assert adv.shape == (4, 3)
    assert torch.all(adv[mask == 0] == 0)
    assert torch.all(adv[mask == 1] != 0)


def test_token_advantages_broadcast_grpo():
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = token_advantages(rewards, mask, group_size=2)
    seq = grpo_advantages(rewards, 2)
    torch.testing.assert_close(adv, torch.tensor([[seq[0], seq[0]], [seq[1], 0.0]]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: grpo_advantages(torch.tensor([1.0, float("nan")]), 2), "rewards has 1 non-finite"),
        (lambda: grpo_advantages(torch.tensor([1.0, float("inf"), 0.0]), 3), "rewards has 1 non-finite"),
        (lambda: grpo_advantages(torch.ones(6), 4), "group_size=4 does not divide the batch of 6"),
        (lambda: grpo_advantages(torch.ones(2, 2), 2), "rewards must be 1-D"),
        (lambda: token_advantages(torch.ones(3), torch.ones(2, 4), 1), "rewards must be \\(B,\\)"),
        (lambda: token_advantages(torch.ones(2), torch.ones(2, 3), 2, "ppo"), "estimator must be one of"),
        (lambda: reinforce_pp_advantages(torch.ones(2), torch.zeros(2, 3)), "selects no token"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
