import math

import pytest
import torch

from lopti.core import kl_penalty


def test_hand_computed_estimators():
    logprobs = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    # log π − log π_ref = log 2
    assert kl_penalty(logprobs, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_penalty(logprobs, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_penalty(logprobs, ref, "k3").item() == pytest.approx(0.5 + math.log(2) - 1)


def test_k3_clamps():
    # log(π_ref/π) = 30 → clamped to 5 → e^5 − 6 ≈ 142.4 → clamped to 10
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == pytest.approx(10.0)
    # log(π_ref/π) = −30 → clamped to −5 → e^−5 + 4
    low = kl_penalty(torch.tensor([0.0]), torch.tensor([-30.0]), "k3")
    assert low.item() == pytest.approx(math.exp(-5) + 4)


def test_k3_nonnegative_and_zero_on_policy():
    logprobs = torch.randn(100)
    ref = torch.randn(100)
    assert torch.all(kl_penalty(logprobs, ref, "k3") >= 0)
    assert torch.all(kl_penalty(logprobs, logprobs, "k3") == 0)


def test_k3_is_unbiased_for_true_kl():
    """E_{x~π}[k3] = KL(π ‖ π_ref) for two categorical distributions."""
    pi = torch.tensor([0.5, 0.3, 0.2])
    ref = torch.tensor([0.2, 0.3, 0.5])
    per_outcome = kl_penalty(pi.log(), ref.log(), "k3")
    true_kl = (pi * (pi / ref).log()).sum()
    assert (pi * per_outcome).sum().item() == pytest.approx(true_kl.item(), rel=1e-5)


def test_mask_zeroes_tokens():
    out = kl_penalty(torch.zeros(2, 2), torch.full((2, 2), -1.0), "k1", mask=torch.tensor([[1, 0], [0, 1]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


def test_bad_arguments():
    with pytest.raises(ValueError, match="estimator must be one of"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")
    with pytest.raises(ValueError, match="shape mismatch"):
        kl_penalty(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="shape mismatch: logprobs\\[2\\], mask\\[3\\]"):
        kl_penalty(torch.zeros(2), torch.zeros(2), mask=torch.ones(3))
