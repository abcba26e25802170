"""The paper's per-token objective on hand-checkable numbers: AR, Lopti isolation, dual clip, KL, entropy."""

import math

import pytest
import torch

from lopti.core import clipped_policy_loss, token_objective

# Two responses of 3 and 2 tokens; π_old = 0.2, 0.8, 0.5 | 0.4, 0.9 (the padding's log-prob is a dummy 0).
OLD = torch.tensor([[0.2, 0.8, 0.5], [0.4, 0.9, 1.0]]).log()
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])


def test_ar_then_lopti_isolation_on_policy():
    # α = 0.5: w = 0.5·π_old + 0.5 = 0.6, 0.9, 0.75 | 0.7, 0.95, so w·Â = 0.6, 0.9, 0.75 | −1.4, −1.9.
    # On-policy r = 1 and the loss is −w·Â on the phase's tokens: phase 1 = π_old < 0.5 (0.5 itself is high).
    expected_reweighted = torch.tensor([[0.6, 0.9, 0.75], [-1.4, -1.9, 0.0]])
    expected_policy = {
        0: torch.tensor([[-0.6, 0.0, 0.0], [1.4, 0.0, 0.0]]),
        1: torch.tensor([[0.0, -0.9, -0.75], [0.0, 1.9, 0.0]]),
    }
    for phase, policy in expected_policy.items():
        terms = token_objective(OLD.clone(), OLD, ADVANTAGES, MASK, alpha=0.5, phase=phase, eta=0.5)
        torch.testing.assert_close(terms.reweighted, expected_reweighted)
        torch.testing.assert_close(terms.policy, policy)
        assert terms.active.tolist() == (policy != 0).tolist()
    terms = token_objective(OLD.clone(), OLD, ADVANTAGES, MASK, alpha=0.5, phase=0, order="high_first")
    torch.testing.assert_close(terms.policy, expected_policy[1])


def test_without_ar_and_lopti_it_is_the_plain_clipped_surrogate():
    logprobs = OLD + torch.tensor([[0.3, -0.4, 0.1], [2.0, -0.2, 0.0]])
    terms = token_objective(logprobs, OLD, ADVANTAGES, MASK, dual_clip=None)
    plain, _ = clipped_policy_loss(logprobs, OLD, ADVANTAGES, MASK, dual_clip=None)
    assert torch.equal(terms.policy, plain) and torch.equal(terms.active, MASK.bool())
    assert torch.equal(terms.weights, torch.ones_like(OLD))
    assert terms.kl is None and terms.entropy is None


def test_clip_and_dual_clip():
    # r = 2 on a positive token is clipped to 1 + 0.24; r = 20 on a negative token would cost 20·|Â|,
    # the dual clip caps it at c·|Â| = 10.
    old = torch.tensor([[0.1, 0.01]]).log()
    logprobs = old + torch.tensor([[math.log(2.0), math.log(20.0)]])
    terms = token_objective(logprobs, old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), dual_clip=10.0)
    torch.testing.assert_close(terms.policy, torch.tensor([[-1.24, 10.0]]))
    assert terms.metrics["dual_clip_frac"].item() == 0.5 and terms.metrics["clip_frac_high"].item() == 0.5


def test_kl_and_entropy_count_each_token_in_one_phase_over_all_response_tokens():
    # log π_ref/π = −1 everywhere: k3 = e^−1 − (−1) − 1 = e^−1 on the phase's tokens, 0 elsewhere.
    # Entropies 1..5 on the 5 response tokens: phase 1 (π_old 0.2, 0.4) gives (1 + 4)/5, phase 2
    # (2 + 3 + 5)/5 — the phases add up to the plain token mean 15/5, each token counted once.
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]])
    ref = OLD - 1.0
    found = {}
    for phase in (None, 0, 1):
        terms = token_objective(OLD.clone(), OLD, ADVANTAGES, MASK, phase=phase, ref_logprobs=ref, entropies=entropies)
        torch.testing.assert_close(terms.kl, math.exp(-1) * terms.active.float())
        found[phase] = terms.entropy.item()
    assert found == pytest.approx({None: 3.0, 0: 1.0, 1: 2.0})


def test_gradient_reaches_only_the_phase_tokens():
    logprobs = OLD.clone().requires_grad_()
    token_objective(logprobs, OLD, ADVANTAGES, MASK, phase=1).policy.sum().backward()
    # on-policy, ∂(−Â·r)/∂log π = −Â on the high tokens (π_old 0.8, 0.5 | 0.9), zero elsewhere
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -1.0, -1.0], [0.0, 2.0, 0.0]]))


def test_bad_phase_is_named():
    with pytest.raises(ValueError, match="phase must be None \\(no Lopti\\), 0 or 1, got 2"):
        token_objective(OLD, OLD, ADVANTAGES, MASK, phase=2)


def test_controls_keep_the_schedule_and_change_the_tokens():
    # split "none": both phases are the plain objective (GRPO twice); "random": the phases partition the
    # response tokens, phase 1 as large as π_old < 0.5's group (2 tokens: 0.2 and 0.4)
    logprobs = OLD + torch.tensor([[0.3, -0.4, 0.1], [2.0, -0.2, 0.0]])
    plain = token_objective(logprobs, OLD, ADVANTAGES, MASK, ref_logprobs=OLD - 1.0)
    for phase in (0, 1):
        both = token_objective(logprobs, OLD, ADVANTAGES, MASK, phase=phase, split="none", ref_logprobs=OLD - 1.0)
        assert torch.equal(both.policy, plain.policy) and torch.equal(both.kl, plain.kl)
        assert torch.equal(both.active, MASK.bool())
    first, second = (
        token_objective(OLD.clone(), OLD, ADVANTAGES, MASK, phase=phase, split="random", split_seed=3).active
        for phase in (0, 1)
    )
    assert int(first.sum()) == 2 and torch.equal(first | second, MASK.bool()) and not (first & second).any()
    with pytest.raises(ValueError, match="split='random' needs a seed"):
        token_objective(OLD, OLD, ADVANTAGES, MASK, phase=0, split="random")
    with pytest.raises(ValueError, match="split must be one of \\('probability', 'random', 'none'\\), got 'middle'"):
        token_objective(OLD, OLD, ADVANTAGES, MASK, phase=0, split="middle")
