"""The dose–response analysis: each seed's least-squares slope on the dose, its tests over seeds, and each dose
against the lowest with Holm's correction."""

import numpy as np
import pytest

from lopti.experiments.dose import detectable_slope, dose_response, slope_weights, slopes_by_seed
from lopti.experiments.statistics import detectable_difference, smallest_p

DOSES = (0.0, 0.3, 0.6, 0.9)


def test_the_contrast_gives_a_line_s_slope_and_ignores_its_intercept():
    weights = slope_weights(DOSES)
    assert weights.sum() == pytest.approx(0.0, abs=1e-12)
    assert weights @ (7.0 + 3.0 * np.array(DOSES)) == pytest.approx(3.0)
    fitted = np.polyfit(DOSES, [1.0, 4.0, 2.0, 9.0], 1)[0]  # least squares on noisy values too
    assert weights @ np.array([1.0, 4.0, 2.0, 9.0]) == pytest.approx(fitted)
    with pytest.raises(ValueError, match="two different doses"):
        slope_weights([0.3, 0.3])


def test_each_seed_s_slope_is_per_problem_and_seeds_missing_a_dose_are_left_out():
    rng = np.random.default_rng(0)
    base = {seed: rng.uniform(0, 100, size=5) for seed in (1, 2, 3)}  # a seed's own per-problem levels
    scores = {dose: {seed: base[seed] + 10 * dose * seed for seed in (1, 2, 3)} for dose in DOSES}
    del scores[0.6][3]
    slopes = slopes_by_seed(scores)
    assert sorted(slopes) == [1, 2]
    np.testing.assert_allclose(slopes[2], np.full(5, 20.0))


def test_every_seed_rising_gives_the_smallest_p_and_holm_orders_the_doses():
    rng = np.random.default_rng(1)
    seeds = range(8)
    scores = {dose: {s: 30 + 5 * dose + rng.normal(0, 1.0, size=50) * 0.1 + s for s in seeds} for dose in DOSES}
    response = dose_response(scores)
    assert response.slope.mean == pytest.approx(5.0, abs=0.2)
    assert response.slope.above == 8 and response.slope.p_value == pytest.approx(smallest_p(8))
    low, high = response.slope.over_problems
    assert low < 5.0 < high
    assert list(response.against_lowest) == [0.3, 0.6, 0.9]
    assert response.against_lowest[0.9].mean == pytest.approx(4.5, abs=0.2)
    # three equal p-values: Holm multiplies the smallest by 3, the others by 2 and 1, then keeps them monotone
    assert all(p == pytest.approx(3 * smallest_p(8)) for p in response.holm_p.values())


def test_no_slope_without_a_seed_at_every_dose():
    response = dose_response({0.0: {1: 10.0}, 0.9: {2: 20.0}})
    assert response.slope is None and response.against_lowest[0.9] is None and response.holm_p[0.9] is None


def test_with_two_doses_one_apart_the_detectable_slope_is_the_detectable_difference():
    assert detectable_slope(5.0, (0.0, 1.0), 12) == pytest.approx(detectable_difference(5.0, 12))
    # four doses spread over 0.9 need a steeper slope than two doses 1 apart
    assert detectable_slope(5.0, DOSES, 12) > detectable_difference(5.0, 12)
