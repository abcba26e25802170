import math

import pytest
import torch

from lopti.core import aggregate_loss, cispo_policy_loss, clipped_policy_loss, sapo_policy_loss


def _loss(ratio, adv, **kwargs):
    ratio = torch.tensor([ratio])
    adv = torch.tensor([adv])
    per_token, metrics = clipped_policy_loss(ratio.log(), torch.zeros(1), adv, torch.ones(1), **kwargs)
    return per_token.item(), metrics


@pytest.mark.parametrize(
    ("ratio", "adv", "expected"),
    [
        (1.0, 2.0, -2.0),  # on-policy: −Â
        (1.5, 1.0, -1.24),  # positive Â clipped at 1 + ε_high
        (0.5, 1.0, -0.5),  # positive Â below the band: unclipped (pessimistic min)
        (0.5, -1.0, 0.8),  # negative Â clipped at 1 − ε_low
        (3.0, -1.0, 3.0),  # negative Â above the band: unclipped
        (20.0, -1.0, 10.0),  # dual clip caps at −c·Â
    ],
)
def test_hand_computed_values(ratio, adv, expected):
    value, _ = _loss(ratio, adv)
    assert value == pytest.approx(expected, rel=1e-5)


def test_dual_clip_off():
    value, metrics = _loss(20.0, -1.0, dual_clip=None)
    assert value == pytest.approx(20.0, rel=1e-5)
    assert metrics["dual_clip_frac"] == 0


def test_metrics():
    ratios = torch.tensor([[0.5, 1.5, 20.0, 1.0]])
    adv = torch.tensor([[-1.0, 1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    _, metrics = clipped_policy_loss(ratios.log(), torch.zeros(1, 4), adv, mask)
    assert metrics["clip_frac_low"] == pytest.approx(0.25)
    assert metrics["clip_frac_high"] == pytest.approx(0.25)
    assert metrics["dual_clip_frac"] == pytest.approx(0.25)
    assert metrics["ratio_mean"] == pytest.approx((0.5 + 1.5 + 20 + 1) / 4, rel=1e-5)
    assert metrics["approx_kl"] == pytest.approx(-ratios.log().mean().item(), rel=1e-5)


def test_padding_never_counts():
    logprobs = torch.tensor([[-1.0, -2.0, 5.0]])
    old = torch.tensor([[-1.0, -2.0, -9.0]])
    adv = torch.tensor([[1.0, 1.0, 100.0]])
    mask = torch.tensor([[1, 1, 0]])
    per_token, metrics = clipped_policy_loss(logprobs, old, adv, mask)
    assert per_token[0, 2] == 0
    assert metrics["clip_frac_high"] == 0
    assert aggregate_loss(per_token, mask).item() == pytest.approx(-1.0)


def test_gradient_vanishes_outside_trust_region():
    logprobs = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    adv = torch.tensor([[1.0, -1.0]])
    per_token, _ = clipped_policy_loss(logprobs, torch.zeros(1, 2), adv, torch.ones(1, 2))
    per_token.sum().backward()
    assert torch.equal(logprobs.grad, torch.zeros(1, 2))


def test_bad_arguments():
    with pytest.raises(ValueError, match="shape mismatch"):
        clipped_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        zeros = torch.zeros(1, 1)
        clipped_policy_loss(zeros, zeros, zeros, torch.ones(1, 1), dual_clip=0.5)
    with pytest.raises(ValueError, match="response_mask selects no token"):
        clipped_policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2))


def test_cispo_caps_and_detaches_the_ratio():
    """r = 2 capped at ε_max = 1.5: loss −1.5·Â·log π, gradient −1.5·Â on log π (the ratio carries none)."""
    logprobs = torch.tensor([[0.5, 0.25]]).log().requires_grad_()
    old = logprobs.detach() - torch.tensor([[2.0, 1.0]]).log()  # r = 2, then 1
    loss, metrics = cispo_policy_loss(logprobs, old, torch.tensor([[1.0, -2.0]]), torch.ones(1, 2), max_ratio=1.5)
    loss.sum().backward()
    torch.testing.assert_close(loss.detach(), torch.tensor([[-1.5 * math.log(0.5), 2.0 * math.log(0.25)]]))
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.5, 2.0]]))
    assert metrics["cispo_clip_frac"] == pytest.approx(0.5)


def test_sapo_gate_is_the_advantage_on_policy_and_fades_off_it():
    """r = 1: loss −(4/τ)·σ(0)·Â = −2Â/τ and gradient −Â on log π; far from 1 the gradient vanishes."""
    logprobs = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    old = logprobs.detach() - torch.tensor([[0.0, 0.0, 3.0]])  # r = 1, 1, e³
    advantages = torch.tensor([[1.0, -1.0, 1.0]])
    loss, _ = sapo_policy_loss(logprobs, old, advantages, torch.ones(1, 3), temperature_pos=1.0, temperature_neg=2.0)
    loss.sum().backward()
    assert loss[0, :2].tolist() == pytest.approx([-2.0, 1.0])
    assert logprobs.grad[0, :2].tolist() == pytest.approx([-1.0, 1.0])
    assert abs(logprobs.grad[0, 2].item()) < 0.01
