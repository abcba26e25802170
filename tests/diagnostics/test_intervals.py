"""The 95% t interval over batches, against closed forms."""

import math

import pytest

from lopti.diagnostics.intervals import interval, paired_differences


def test_the_interval_uses_t_quantiles_that_match_closed_forms():
    # two values a, b: half-width t(0.975, 1) · |a − b| / 2, with t(p, 1) = tan(π(p − 1/2)) (Cauchy)
    cell = interval([0.2, 0.4])
    half = math.tan(math.pi * 0.475) * 0.1
    assert (cell["low"], cell["high"]) == (pytest.approx(0.3 - half, rel=1e-9), pytest.approx(0.3 + half, rel=1e-9))
    assert interval([0.5, 0.5, 0.5]) == {"mean": 0.5, "low": 0.5, "high": 0.5, "batches": 3}


def test_interval_over_batches():
    # three values, sd 0.1: half-width t(0.975, 2) · 0.1 / √3, with t(0.975, 2) = 0.95 / √0.04875
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 0.1 / math.sqrt(3)
    cell = interval([0.5, None, 0.7, 0.6])
    assert cell["mean"] == pytest.approx(0.6) and cell["batches"] == 3
    assert cell["low"] == pytest.approx(0.6 - half) and cell["high"] == pytest.approx(0.6 + half)
    assert interval([0.4]) == {"mean": 0.4, "low": None, "high": None, "batches": 1}
    assert interval([None, None]) == {"mean": None, "low": None, "high": None, "batches": 0}
    assert paired_differences([0.5, None, 0.7], [0.4, 0.3, None]) == [pytest.approx(0.1), None, None]
