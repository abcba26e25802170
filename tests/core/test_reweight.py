import math

import pytest
import torch

from lopti.core import aggregate_loss, ar_weights, clipped_policy_loss, reweight_advantages


def test_weights_hand_computed():
    old = torch.log(torch.tensor([0.1, 0.5, 1.0]))
    torch.testing.assert_close(ar_weights(old, 0.3), torch.tensor([0.73, 0.85, 1.0]))
    assert torch.equal(ar_weights(old, 0.0), torch.ones(3))


def test_weights_are_detached():
    old = torch.log(torch.tensor([0.2, 0.7])).requires_grad_()
    assert not ar_weights(old, 0.5).requires_grad


def test_reweight_applies_to_both_signs():
    adv = torch.tensor([2.0, -2.0])
    old = torch.log(torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(reweight_advantages(adv, old, 0.2), torch.tensor([1.8, -1.8]))


def test_gradient_equals_minus_weight_times_advantage_over_denominator():
    """Inside the trust region ∂L/∂log π_t = −w_t·Â_t / #tokens for the token-mean AR loss."""
    torch.manual_seed(0)
    old = torch.log(torch.rand(3, 5) * 0.9 + 0.05)
    mask = torch.ones(3, 5)
    mask[2, 3:] = 0
    adv = torch.randn(3, 5) * mask
    logprobs = old.clone().requires_grad_()
    alpha = 0.3
    per_token, _ = clipped_policy_loss(logprobs, old, reweight_advantages(adv, old, alpha), mask)
    aggregate_loss(per_token, mask).backward()
    expected = -(alpha * old.exp() + 1 - alpha) * adv / mask.sum()
    torch.testing.assert_close(logprobs.grad, expected * mask)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, math.nan])
def test_alpha_outside_unit_interval(alpha):
    with pytest.raises(ValueError, match="alpha must be in"):
        ar_weights(torch.zeros(2), alpha)


def test_shape_mismatch():
    with pytest.raises(ValueError, match="shape mismatch: advantages\\[2\\], old_logprobs\\[3\\]"):
        reweight_advantages(torch.zeros(2), torch.zeros(3), 0.1)


def test_nonfinite_old_logprobs():
    with pytest.raises(ValueError, match="old_logprobs has 1 non-finite"):
        ar_weights(torch.tensor([0.0, float("nan")]), 0.1)
