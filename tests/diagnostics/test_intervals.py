"""The t quantile and the 95% interval over batches, against closed forms."""

import math
import statistics

import pytest

from lopti.diagnostics.intervals import interval, paired_differences, t_quantile


def test_t_quantile_matches_closed_forms():
    # df = 1 is Cauchy: tan(π(p − 1/2)); df = 2: (2p − 1)/√(2p(1 − p)); df → ∞: the normal quantile
    for p in (0.9, 0.975):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-7)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-7)
    assert t_quantile(0.975, 100_000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), rel=1e-4)
    assert t_quantile(0.975, 3) > t_quantile(0.975, 7) > t_quantile(0.975, 30)
    with pytest.raises(ValueError, match=r"0\.5 < p < 1 and df ≥ 1"):
        t_quantile(0.975, 0)


def test_interval_over_batches():
    # three values, sd 0.1: half-width t(0.975, 2) · 0.1 / √3, with t(0.975, 2) = 0.95 / √0.04875
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 0.1 / math.sqrt(3)
    cell = interval([0.5, None, 0.7, 0.6])
    assert cell["mean"] == pytest.approx(0.6) and cell["batches"] == 3
    assert cell["low"] == pytest.approx(0.6 - half) and cell["high"] == pytest.approx(0.6 + half)
    assert interval([0.4]) == {"mean": 0.4, "low": None, "high": None, "batches": 1}
    assert interval([None, None]) == {"mean": None, "low": None, "high": None, "batches": 0}
    assert paired_differences([0.5, None, 0.7], [0.4, 0.3, None]) == [pytest.approx(0.1), None, None]
