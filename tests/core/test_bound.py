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


def test_norm_from_log_sum_sq_matches_autograd():
    # √(1 − 2π + Σ p²) is the norm of softmax(z) − e_k: from log π and log Σ p² alone, without the logits
    from lopti.core.bound import logit_grad_norm_from_sum_sq

    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 50, generator=generator, dtype=torch.float64) * 6).requires_grad_(True)
    ids = torch.randint(50, (64,), generator=generator)
    ids[::2] = logits.detach()[::2].argmax(-1)  # half the tokens are the likeliest ones
    logps = torch.log_softmax(logits, -1).gather(1, ids[:, None]).squeeze(1)
    (-logps.sum()).backward()
    log_sum_sq = torch.logsumexp(2 * torch.log_softmax(logits.detach(), -1), dim=-1)
    norm = logit_grad_norm_from_sum_sq(logps, log_sum_sq)
    assert logps.exp().max() > 0.99 and logps.exp().min() < 0.01  # confident and unlikely tokens alike
    torch.testing.assert_close(norm, logits.grad.norm(dim=-1), atol=1e-12, rtol=0)


def test_norm_from_log_sum_sq_stays_inside_the_bounds_when_rounding_breaks_it():
    from lopti.core.bound import logit_grad_norm_from_sum_sq

    # π = 1 − 1e-4 with a log Σ p² rounded below log π² (impossible exactly): the others' part clamps to 0
    logp = torch.tensor([math.log1p(-1e-4)] * 2)
    norm = logit_grad_norm_from_sum_sq(logp, torch.stack([2 * logp[0] - 1e-7, 2 * logp[0] + 1e-3]))
    assert norm[0].item() == pytest.approx(1e-4, rel=1e-6)  # (1 − π), the lower end
    assert norm[1].item() == pytest.approx(math.sqrt(2) * 1e-4, rel=1e-6)  # clamped to √2 (1 − π), the upper end
    with pytest.raises(ValueError, match="must have the shape of logprobs"):
        logit_grad_norm_from_sum_sq(logp, logp[:1])
