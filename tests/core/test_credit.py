"""Per-token credit steps on hand-computed numbers: each preset's weights or masks, how steps compose,
and the gradient each token gets (zero when masked, exactly w × the plain gradient when reweighted)."""

import math

import pytest
import torch

from lopti.core import (
    CreditContext,
    TokenCredit,
    aggregate_loss,
    ar_credit,
    ar_weights,
    combine_credit,
    credit_problems,
    lopti_credit,
    make_credit_steps,
    phase_masks,
    token_objective,
)
from lopti.core.credit_presets import clip_cov, high_entropy, kl_cov, stapo, stare, tr_grpo, w_reinforce


def context(logprobs, advantages, mask, entropies=None, old=None, phase=None):
    logprobs = torch.as_tensor(logprobs, dtype=torch.float32)
    old = logprobs if old is None else torch.as_tensor(old, dtype=torch.float32)
    advantages = torch.as_tensor(advantages, dtype=torch.float32)
    entropies = None if entropies is None else torch.as_tensor(entropies, dtype=torch.float32)
    return CreditContext(logprobs, old, advantages, torch.as_tensor(mask).bool(), entropies, phase)


# --- STAPO (2602.15620): Â > 0, π < τ_p = 0.01, H < τ_h = 5th percentile of the batch's entropies.
STAPO_PROBS = [[0.005, 0.005, 0.5, 0.9], [0.005, 0.5, 0.9, 1.0]]
STAPO_ENTROPIES = [[0.01, 2.0, 0.5, 0.3], [0.1, 1.0, 0.2, 0.0]]  # the padding's 0.0 must not enter the quantile
STAPO_ADVANTAGES = [[1.0] * 4, [-0.5] * 4]
STAPO_MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]


def test_stapo_drops_rare_confident_positive_tokens_with_the_papers_defaults():
    # Valid entropies sorted: 0.01 0.1 0.2 0.3 0.5 1.0 2.0; the 5% quantile sits 0.3 of the way from the
    # first to the second: τ_h = 0.01 + 0.3·0.09 = 0.037. Only (0,0) is rare (0.005), below τ_h and positive;
    # (0,1) is rare but uncertain, (1,0) is rare but negative, (0,2) is confident but not rare.
    ctx = context(torch.tensor(STAPO_PROBS).log(), STAPO_ADVANTAGES, STAPO_MASK, STAPO_ENTROPIES)
    decision = stapo()(ctx)
    assert decision.drop.tolist() == [[True, False, False, False], [False, False, False, False]]
    assert decision.weights is None and decision.keep is None


def test_stapo_renormalises_the_loss_over_the_remaining_tokens():
    # On-policy the loss per token is −Â: row 0 gives −1 on 3 kept tokens, row 1 +0.5 on 3 tokens:
    # token-mean over the 6 counted tokens, not 7: (−3 + 1.5) / 6 = −0.25.
    logprobs = torch.tensor(STAPO_PROBS).log()
    terms = token_objective(
        logprobs, logprobs, torch.tensor(STAPO_ADVANTAGES), torch.tensor(STAPO_MASK),
        entropies=torch.tensor(STAPO_ENTROPIES), credit={"stapo": stapo()},
    )  # fmt: skip
    assert terms.counted.sum().item() == 6 and not terms.counted[0, 0]
    assert aggregate_loss(terms.policy, terms.counted).item() == pytest.approx(-0.25)
    assert terms.policy[0, 0].item() == 0.0


# --- High-entropy minority (2506.01939): keep H ≥ the (1 − ρ) quantile, ρ = 0.2.
def test_high_entropy_keeps_the_top_fifth_of_tokens_by_entropy():
    # 10 valid entropies 0.1 … 1.0; the 0.8 quantile is 0.8 + 0.2·0.1 = 0.82, so 0.9 and 1.0 stay: 2 of 10.
    entropies = [[0.1, 0.9, 0.3, 0.4, 0.5, 0.6], [0.7, 1.0, 0.2, 0.8, 5.0, 5.0]]
    mask = [[1] * 6, [1, 1, 1, 1, 0, 0]]
    ctx = context(torch.zeros(2, 6), torch.ones(2, 6), mask, entropies)
    keep = high_entropy()(ctx).keep & ctx.response_mask
    assert keep.nonzero().tolist() == [[0, 1], [1, 1]]


def test_high_entropy_leaves_the_kl_on_every_token():
    entropies = torch.tensor([[0.1, 0.9, 0.3, 0.4]])
    logprobs = torch.full((1, 4), -1.0)
    terms = token_objective(
        logprobs, logprobs, torch.ones(1, 4), torch.ones(1, 4), ref_logprobs=logprobs - 1.0,
        entropies=entropies, credit={"high_entropy": high_entropy(rho=0.25)},
    )  # fmt: skip
    assert terms.kept.tolist() == [[False, True, False, False]]
    torch.testing.assert_close(terms.kl, torch.full((1, 4), math.exp(-1)))  # k3 at log π_ref/π = −1


# --- Clip-Cov and KL-Cov (2505.22617): Cov = (Â − mean Â)(log π − mean log π).
# Â = +1 | −1 and log π = 0, −2, −2 | −2, −2, −8: mean log π = −16/6, so Cov = 8/3, 2/3, 2/3 | −2/3, −2/3, 16/3.
COV_LOGPROBS = [[0.0, -2.0, -2.0], [-2.0, -2.0, -8.0]]
COV_ADVANTAGES = [[1.0] * 3, [-1.0] * 3]
COV_MASK = [[1] * 3] * 2


def test_clip_cov_detaches_the_token_with_covariance_between_1_and_5():
    # Only (0,0) has 1 < Cov < 5 (16/3 is above ω_high); the budget max(1, ⌊2e-4·6⌋) = 1 takes it.
    decision = clip_cov()(context(COV_LOGPROBS, COV_ADVANTAGES, COV_MASK))
    assert (~decision.keep).nonzero().tolist() == [[0, 0]]
    assert decision.selected.nonzero().tolist() == [[0, 0]]


def test_clip_cov_leaves_tokens_the_surrogate_clip_already_holds():
    # (0,0) moved to ratio e^0.3 = 1.35 > 1 + ε_high with Â > 0: the clip holds it, so nothing is detached.
    old = torch.tensor(COV_LOGPROBS) - torch.tensor([[0.3, 0, 0], [0, 0, 0]])
    decision = clip_cov()(context(COV_LOGPROBS, COV_ADVANTAGES, COV_MASK, old=old))
    assert decision.keep.all()


def test_kl_cov_penalises_the_largest_covariance_token():
    # k = max(1, ⌊2e-3·6⌋) = 1 token: (1,2) with Cov ≈ 16/3. Its penalty is β·|log π − log π_old| = 0.1.
    logprobs = torch.tensor(COV_LOGPROBS) + torch.tensor([[0, 0, 0], [0, 0, 0.1]])
    decision = kl_cov()(context(logprobs, COV_ADVANTAGES, COV_MASK, old=COV_LOGPROBS))
    assert decision.selected.nonzero().tolist() == [[1, 2]]
    torch.testing.assert_close(decision.penalty, torch.tensor([[0, 0, 0], [0, 0, 0.1]]))


# --- W-REINFORCE (2506.01347): λ = 0.1 on positive samples.
def test_w_reinforce_down_weights_positive_advantages():
    decision = w_reinforce()(context(torch.zeros(2, 2), [[2.0, 2.0], [-1.0, 0.0]], [[1, 1], [1, 1]]))
    torch.testing.assert_close(decision.weights, torch.tensor([[0.1, 0.1], [1.0, 1.0]]))


# --- TR-GRPO (2511.00066): w = clip(α(σ(π/τ) − μ), L, U), our defaults α 4, τ 1, μ 0.5, L 0.1, U 1.
def test_tr_grpo_weight_is_an_increasing_clipped_sigmoid_of_the_probability():
    # σ(1) = 0.731059 → 4·0.231059 = 0.924234; σ(0.5) = 0.622459 → 0.489837; σ(0.1) = 0.524979 → 0.099917 → 0.1
    decision = tr_grpo()(context(torch.tensor([[1.0, 0.5, 0.1]]).log(), torch.ones(1, 3), [[1, 1, 1]]))
    torch.testing.assert_close(decision.weights, torch.tensor([[0.924234, 0.489837, 0.1]]), rtol=0, atol=1e-6)


# --- STARE (2606.19236): top P = 10% surprisal of positive (and, two-sided, negative) tokens.
STARE_LOGPROBS = [
    [-0.1, -0.2, -3.0, -0.4, -0.5],
    [-0.6, -0.7, -0.8, -0.9, -1.0],
    [-0.1, -5.0, -0.3, 0.0, 0.0],
]
STARE_ADVANTAGES = [[1.0] * 5, [1.0] * 5, [-1.0] * 5]
STARE_MASK = [[1] * 5, [1] * 5, [1, 1, 1, 0, 0]]


def test_stare_amplifies_the_most_surprising_positive_tokens_below_the_target_entropy():
    # 10 positive tokens → ⌈0.1·10⌉ = 1: (0,2) with surprisal 3; 3 negative → ⌈0.3⌉ = 1: (2,1), surprisal 5.
    low = torch.full((3, 5), 0.1)
    one_sided = stare()(context(STARE_LOGPROBS, STARE_ADVANTAGES, STARE_MASK, low))
    expected = torch.ones(3, 5)
    expected[0, 2] = 1.1
    torch.testing.assert_close(one_sided.weights, expected)
    two_sided = stare(two_sided=True)(context(STARE_LOGPROBS, STARE_ADVANTAGES, STARE_MASK, low))
    expected[2, 1] = 0.9
    torch.testing.assert_close(two_sided.weights, expected)
    assert two_sided.selected.nonzero().tolist() == [[0, 2], [2, 1]]


def test_stare_is_plain_grpo_at_or_above_the_target_entropy():
    high = torch.full((3, 5), 0.5)  # mean 0.5 ≥ H_tgt = 0.3: the gate is off
    decision = stare(two_sided=True)(context(STARE_LOGPROBS, STARE_ADVANTAGES, STARE_MASK, high))
    assert torch.equal(decision.weights, torch.ones(3, 5)) and decision.selected.sum() == 2


# --- AR and Lopti as credit steps, and how steps compose.
def test_ar_and_lopti_are_credit_steps():
    old = torch.tensor([[0.2, 0.8, 0.5], [0.4, 0.9, 1.0]]).log()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    ctx = context(old, torch.ones(2, 3), mask, phase=1)
    torch.testing.assert_close(ar_credit(0.5)(ctx).weights, ar_weights(old, 0.5))
    lopti = lopti_credit(eta=0.5)(ctx)
    high = phase_masks(old, mask, 0.5)[1]
    assert torch.equal(lopti.keep, high) and torch.equal(lopti.regularised, high)
    assert lopti_credit()(context(old, torch.ones(2, 3), mask)) == TokenCredit()  # no phase: no isolation


def test_steps_compose_weights_multiply_masks_intersect_drops_unite_penalties_add():
    ctx = context(torch.zeros(1, 3), torch.ones(1, 3), [[1, 1, 1]])

    def first(_):
        return TokenCredit(
            weights=torch.tensor([[0.5, 1.0, 2.0]]), keep=torch.tensor([[True, True, False]]),
            drop=torch.tensor([[True, False, False]]), penalty=torch.tensor([[1.0, 0.0, 0.0]]),
        )  # fmt: skip

    def second(_):
        return TokenCredit(
            weights=torch.tensor([[2.0, 3.0, 1.0]]), keep=torch.tensor([[False, True, True]]),
            drop=torch.tensor([[False, True, False]]), penalty=torch.tensor([[0.5, 0.5, 0.0]]),
        )  # fmt: skip

    combined, each = combine_credit(ctx, {"first": first, "second": second})
    assert combined.weights.tolist() == [[1.0, 3.0, 2.0]]
    assert combined.keep.tolist() == [[False, True, False]] and combined.drop.tolist() == [[True, True, False]]
    assert combined.penalty.tolist() == [[1.5, 0.5, 0.0]] and list(each) == ["first", "second"]


def test_ar_composes_with_stapo():
    # AR α = 0.5 scales every kept token's loss by 0.5·π_old + 0.5; STAPO still drops (0,0).
    logprobs = torch.tensor(STAPO_PROBS).log()
    advantages, mask = torch.tensor(STAPO_ADVANTAGES), torch.tensor(STAPO_MASK)
    terms = token_objective(
        logprobs, logprobs, advantages, mask, alpha=0.5,
        entropies=torch.tensor(STAPO_ENTROPIES), credit={"stapo": stapo()},
    )  # fmt: skip
    expected = -advantages * (0.5 * torch.tensor(STAPO_PROBS) + 0.5) * terms.counted
    torch.testing.assert_close(terms.policy, expected)


def test_bad_steps_are_named():
    ctx = context(torch.zeros(1, 3), torch.ones(1, 3), [[1, 1, 1]])
    with pytest.raises(ValueError, match="credit step 'mine' returned Tensor, not a TokenCredit"):
        combine_credit(ctx, {"mine": lambda c: torch.ones(1, 3)})
    with pytest.raises(ValueError, match=r"shape mismatch: advantages\[1, 3\], mine.weights\[1, 2\]"):
        combine_credit(ctx, {"mine": lambda c: TokenCredit(weights=torch.ones(1, 2))})
    with pytest.raises(ValueError, match=r"stapo' needs per-token entropies"):
        stapo()(ctx)
    with pytest.raises(ValueError, match=r"\['ar'\] are taken by the built-in AR and Lopti steps"):
        token_objective(
            torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3), credit={"ar": stapo()}
        )


def test_preset_selection_problems_are_one_line_each():
    problems = credit_problems(
        ["clip_cov", "kl_cov", "nope", "tr_grpo"], {"kl_cov": {"ratio": 2.0}, "stare": {}}, ar_alpha=0.3
    )
    assert problems == [
        "token_credit: unknown preset 'nope'; choose from stapo, high_entropy, clip_cov, kl_cov, w_reinforce, "
        "tr_grpo, stare",
        "token_credit combines 'clip_cov' and 'kl_cov': two treatments of the same high-covariance tokens; choose one",
        "token_credit 'tr_grpo' with ar_alpha=0.3: both shape the weight by probability (TR-GRPO generalises AR's "
        "linear weight); set ar_alpha=0 or drop tr_grpo",
        "token_credit_kwargs.kl_cov: ratio must be in (0, 1], got 2.0",
        "token_credit_kwargs.stare: 'stare' is not in token_credit ['clip_cov', 'kl_cov', 'nope', 'tr_grpo']",
    ]
    assert credit_problems(["stapo"], {"stapo": {"tau": 1}}) == [
        "token_credit_kwargs.stapo: unknown constant(s) 'tau'; it takes prob_threshold, entropy_quantile"
    ]
    assert credit_problems(["stapo", "stapo"], {}) == ["token_credit: 'stapo' is listed twice"]
    with pytest.raises(ValueError, match="entropy_quantile must be in \\[0, 1\\], got 5"):
        make_credit_steps(["stapo"], {"stapo": {"entropy_quantile": 5}})


# --- Gradients: masked tokens get exactly zero, reweighted ones w × the plain gradient, penalised ones
# the plain gradient plus β·sign(log π − log π_old).
GRADIENT_PRESETS = {
    "stapo": stapo(prob_threshold=0.3, entropy_quantile=0.5),
    "high_entropy": high_entropy(),
    "clip_cov": clip_cov(ratio=0.5, cov_low=0.0, cov_high=100.0),
    "kl_cov": kl_cov(ratio=0.3),
    "w_reinforce": w_reinforce(),
    "tr_grpo": tr_grpo(),
    "stare": stare(top_ratio=0.3, target_entropy=10.0, two_sided=True),
}


@pytest.mark.parametrize("name", list(GRADIENT_PRESETS))
def test_gradient_is_zero_when_masked_and_the_weight_times_the_plain_gradient_otherwise(name):
    generator = torch.Generator().manual_seed(0)
    old = torch.rand(4, 6, generator=generator).clamp(min=0.02).log()
    shift = 0.1 * torch.randn(4, 6, generator=generator)  # slightly off-policy, inside the clip range
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 6).clone()
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[3, 4:] = False
    entropies = torch.rand(4, 6, generator=generator) * 2

    def gradient(credit):
        logprobs = (old + shift).requires_grad_()
        terms = token_objective(logprobs, old, advantages, mask, entropies=entropies, credit=credit)
        terms.policy.sum().backward()
        return logprobs.grad, terms

    plain, _ = gradient(None)
    assert torch.all(plain[mask] != 0), "the test needs a gradient on every token"
    torch.manual_seed(0)
    graded, terms = gradient({name: GRADIENT_PRESETS[name]})
    decision = terms.credit[name]
    assert torch.all(graded[~terms.kept] == 0)
    expected = plain * terms.weights * terms.kept
    if decision.penalty is not None:
        expected = expected + 1.0 * shift.sign() * decision.selected * terms.kept
    torch.testing.assert_close(graded, expected, rtol=1e-6, atol=1e-9)
    changed = (terms.weights != 1) | ~terms.kept | (decision.selected if decision.selected is not None else False)
    assert (changed & mask).any(), f"{name} must act on some token of the test batch"
