import math

import pytest
import torch

from lopti.core import grad_norm_bounds, logit_grad_norm


def test_matches_autograd():
    torch.manual_seed(0)
    logits = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 3, 6, 2])
    nll = -torch.log_softmax(logits, dim=-1).gather(1, ids[:, None]).sum()
    nll.backward()
    norm, one_minus_pi = logit_grad_norm(logits, ids)
    torch.testing.assert_close(norm, logits.grad.norm(dim=-1))
    torch.testing.assert_close(one_minus_pi, 1 - torch.softmax(logits, -1).gather(1, ids[:, None]).squeeze(1))


@pytest.mark.parametrize("vocab_size", [2, 3, 10, 151, 4096, 50_000])
@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_bound_holds_for_random_logits(vocab_size, scale):
    generator = torch.Generator().manual_seed(vocab_size)
    logits = torch.randn(64, vocab_size, generator=generator) * scale
    ids = torch.randint(vocab_size, (64,), generator=generator)
    norm, one_minus_pi = logit_grad_norm(logits, ids)
    lower, upper = grad_norm_bounds(one_minus_pi, vocab_size)
    assert torch.all(lower <= norm * (1 + 1e-9))
    assert torch.all(norm <= upper * (1 + 1e-9))


@pytest.mark.parametrize("vocab_size", [2, 100, 32_000])
def test_bound_at_extremes(vocab_size):
    # π → 1: the sampled token dominates; π → 0: the mass sits elsewhere.
    logits = torch.zeros(2, vocab_size)
    logits[0, 0] = 40.0
    logits[1, 1] = 40.0
    norm, one_minus_pi = logit_grad_norm(logits, torch.tensor([0, 0]))
    lower, upper = grad_norm_bounds(one_minus_pi, vocab_size)
    assert 0 < one_minus_pi[0] < 1e-12
    assert one_minus_pi[1] == pytest.approx(1.0)
    assert torch.all(lower <= norm * (1 + 1e-9)) and torch.all(norm <= upper * (1 + 1e-9))
    # all mass on one other token: the upper bound √2·(1 − π) is reached
    assert norm[1].item() == pytest.approx(math.sqrt(2), rel=1e-9)


def test_uniform_others_reach_lower_bound():
    logits = torch.zeros(1, 5)
    logits[0, 2] = 1.0
    norm, one_minus_pi = logit_grad_norm(logits, torch.tensor([2]))
    lower, _ = grad_norm_bounds(one_minus_pi, 5)
    assert norm.item() == pytest.approx(lower.item(), rel=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match="token_ids"):
        logit_grad_norm(torch.zeros(2, 3, 5), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size must be"):
        grad_norm_bounds(torch.zeros(1), 1)
