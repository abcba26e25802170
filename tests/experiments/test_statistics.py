"""The study statistics against hand-computed cases, brute-force enumeration and scipy."""

import itertools
import math
import time

import numpy as np
import pytest
from scipy import stats

from lopti.experiments.statistics import (
    EXACT_SEEDS,
    bootstrap_interval,
    detectable_difference,
    first_batch_reaching,
    fisher_p,
    holm,
    paired_difference,
    sign_flip_p,
    smallest_p,
)


def enumerated_p(differences):
    """The two-sided sign-flip p-value by listing every sign pattern: the share whose |mean| reaches the observed."""
    observed = abs(sum(differences))
    sums = [
        abs(sum(s * d for s, d in zip(signs, differences, strict=True)))
        for signs in itertools.product((1, -1), repeat=len(differences))
    ]
    return sum(total >= observed - 1e-12 for total in sums) / len(sums)


def test_the_exact_sign_flip_p_value_of_a_hand_computed_case():
    # |d| sums to 21, the observed sum is 17: |sum| ≥ 17 needs the flipped |d| to sum to ≤ 2 ({}, {1}, {2})
    # or ≥ 19 (their complements): 6 of the 64 patterns
    assert sign_flip_p([1, -2, 3, 4, 5, 6]) == pytest.approx(6 / 64)
    assert sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx(2 / 32)  # all one side: 2 of 32
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_p([0.1, -0.1]) == 1.0


def test_the_sign_flip_p_value_matches_enumeration_scipy_and_the_sign_test():
    rng = np.random.default_rng(3)
    for seeds in (2, 3, 5, 8, 11):
        differences = list(rng.normal(0.02, 0.05, size=seeds))
        assert sign_flip_p(differences) == pytest.approx(enumerated_p(differences))
        exact = stats.permutation_test((differences,), np.mean, permutation_type="samples", n_resamples=np.inf)
        assert sign_flip_p(differences) == pytest.approx(exact.pvalue)
    ties = [0.1, 0.1, -0.1, 0.2, -0.2, 0.3]  # many patterns reach the observed sum exactly
    assert sign_flip_p(ties) == pytest.approx(enumerated_p(ties))
    # with every difference on one side it is the exact binomial sign test's p
    assert sign_flip_p([0.3] * 7) == pytest.approx(stats.binomtest(7, 7).pvalue)


def test_five_seeds_can_never_reach_five_percent():
    assert smallest_p(5) == 0.0625 > 0.05 > smallest_p(6) == 0.03125
    assert smallest_p(1) == 1.0


def test_twenty_seeds_are_exact_and_quick_and_more_are_sampled():
    started = time.perf_counter()
    assert sign_flip_p([0.1] * EXACT_SEEDS) == 2 / 2**EXACT_SEEDS
    differences = np.random.default_rng(5).normal(0.01, 0.05, size=EXACT_SEEDS)
    p = sign_flip_p(differences)
    assert time.perf_counter() - started < 5
    # against 400,000 random sign patterns, within their sampling error
    signs = np.random.default_rng(6).choice([-1.0, 1.0], size=(400_000, EXACT_SEEDS))
    sampled = np.mean(np.abs(signs @ differences) >= abs(differences.sum()) - 1e-12)
    assert p == pytest.approx(sampled, abs=4 * np.sqrt(p * (1 - p) / 400_000))
    p = sign_flip_p([0.1] * (EXACT_SEEDS + 1))
    assert 0 < p < 1e-4  # exact would be 2 / 2^21; 100,000 random patterns resolve it to about 1e-5


def test_holm_on_a_hand_computed_family():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → monotone: 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def test_the_detectable_difference_has_80_percent_power():
    spread, seeds = 0.05, 5
    effect = detectable_difference(spread, seeds)
    # the rate at which a paired t-test rejects when the true difference is `effect`, by simulation
    rng = np.random.default_rng(0)
    draws = rng.normal(effect, spread, size=(40_000, seeds))
    rejected = stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05
    assert rejected.mean() == pytest.approx(0.80, abs=0.01)
    # many seeds: the normal approximation (z(0.975) + z(0.80)) · s / √n
    assert detectable_difference(1.0, 400) == pytest.approx((1.959964 + 0.841621) / 20, rel=5e-3)
    assert detectable_difference(0.05, 1) is None and detectable_difference(0.0, 5) is None


def test_fisher_on_a_hand_computed_table():
    # 0 of 5 collapsed against 5 of 5: the observed table and its mirror, each 1 of C(10, 5) = 252
    assert fisher_p(0, 5, 5, 5) == pytest.approx(2 / 252)
    assert fisher_p(2, 5, 2, 5) == 1.0
    assert fisher_p(1, 10, 4, 10) == pytest.approx(stats.fisher_exact([[1, 9], [4, 6]]).pvalue)
    with pytest.raises(ValueError, match="out of range"):
        fisher_p(6, 5, 0, 5)


def test_the_bootstrap_carries_the_held_out_sets_sampling_error():
    rng = np.random.default_rng(1)
    solved = (rng.random(400) < 0.3).astype(float)
    variant = {seed: solved for seed in range(5)}  # every seed solves the same 30% of the problems
    base = {seed: np.zeros(400) for seed in range(5)}
    low, high = bootstrap_interval(variant, base)
    binomial = 1.959964 * math.sqrt(solved.mean() * (1 - solved.mean()) / 400)
    assert (low, high) == (
        pytest.approx(solved.mean() - binomial, abs=0.01),
        pytest.approx(solved.mean() + binomial, abs=0.01),
    )
    # from accuracies alone, a binomial redraw over the same number of problems gives about the same width
    low2, high2 = bootstrap_interval({s: solved.mean() for s in range(5)}, {s: 0.0 for s in range(5)}, problems=400)
    assert high2 - low2 == pytest.approx(high - low, rel=0.1)


def test_the_bootstrap_pairs_the_problems():
    # the variant solves what the base solves plus 10 more problems: the difference is 10/400 on any resample of
    # seeds, and resampled problems keep it near there, far tighter than two independent binomials
    rng = np.random.default_rng(2)
    base = {seed: (rng.random(400) < 0.5).astype(float) for seed in range(4)}
    variant = {}
    for seed, scores in base.items():
        better = scores.copy()
        better[np.flatnonzero(scores == 0)[:10]] = 1.0
        variant[seed] = better
    low, high = bootstrap_interval(variant, base)
    assert 0.01 < low < 0.025 < high < 0.04
    unpaired = bootstrap_interval(
        {s: v.mean() for s, v in variant.items()}, {s: b.mean() for s, b in base.items()}, problems=400
    )
    assert unpaired[1] - unpaired[0] > 3 * (high - low)


def test_paired_difference_uses_common_seeds_and_counts_signs():
    variant = {0: 0.50, 1: 0.40, 2: 0.45, 3: 0.9}
    base = {0: 0.40, 1: 0.45, 2: 0.45, 7: 0.1}
    paired = paired_difference(variant, base)
    assert paired.seeds == [0, 1, 2]
    assert paired.mean == pytest.approx((0.10 - 0.05 + 0.0) / 3)
    assert (paired.above, paired.below, paired.equal) == (1, 1, 1)
    assert paired.p_value == pytest.approx(enumerated_p([0.10, -0.05, 0.0]))
    assert paired.over_seeds[0] <= paired.mean <= paired.over_seeds[1] and paired.over_problems is None
    assert paired.detectable == pytest.approx(detectable_difference(float(np.std([0.1, -0.05, 0.0], ddof=1)), 3))
    assert paired_difference({0: 0.5}, {1: 0.5}) is None
    single = paired_difference({0: 0.5}, {0: 0.4})
    assert single.over_seeds is None and single.detectable is None and single.p_value == 1.0
    # with the held-out set's size, the interval widens by its sampling error
    wide = paired_difference(variant, base, problems=100)
    assert wide.over_seeds == paired.over_seeds
    assert wide.over_problems[1] - wide.over_problems[0] > paired.over_seeds[1] - paired.over_seeds[0]


def test_first_batch_reaching_a_threshold():
    curve = {1: 0.1, 2: 0.6, 3: 0.6, 4: 0.9, 5: 0.2}
    assert first_batch_reaching(curve, 0.5) == 4  # (0.1 + 0.6 + 0.6) / 3 < 0.5; (0.6 + 0.6 + 0.9) / 3 ≥ 0.5
    assert first_batch_reaching(curve, 0.5, window=1) == 2
    assert first_batch_reaching(curve, 0.95) is None
