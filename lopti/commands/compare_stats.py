"""The statistics of `lopti compare`'s results.md: t-intervals over seeds, paired differences, threshold batches.

Pure functions of numbers; compare_report reads the runs and renders the tables.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Student t's 0.975 quantile for 1..30 degrees of freedom (two-sided 95%), to six decimals
T_975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip
Z_975 = 1.959964  # the normal's 0.975 quantile


def t_quantile_975(df: int) -> float:
    """Return Student t's 0.975 quantile at `df` degrees of freedom.

    Exact (to six decimals) up to 30 from the table; beyond, the Cornish-Fisher expansion
    z + (z³ + z) / 4df + (5z⁵ + 16z³ + 3z) / 96df², within 1e-4 of the quantile from df 31 on."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_interval(values: list[float]) -> tuple[float, float | None]:
    """Return the mean of `values` and the half-width of its 95% Student t-interval over them,
    t(0.975, n − 1) · s / √n with s the sample standard deviation; None for a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_quantile_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class PairedDifference:
    """A variant's held-out accuracy minus the base's, seed by seed, on the seeds both have."""

    seeds: list[int]
    mean: float
    half_width: float | None  # of the 95% t-interval; None with a single seed
    above: int
    below: int
    equal: int

    def excludes_zero(self) -> bool:
        """Return whether the 95% interval lies entirely above or below 0."""
        return self.half_width is not None and abs(self.mean) > self.half_width


def paired_difference(variant: dict[int, float], base: dict[int, float]) -> PairedDifference | None:
    """Return variant[s] − base[s] summarised over the seeds s in both (mean, t-interval, signs); None if
    they share no seed. Differences within 1e-12 of 0 count as equal."""
    seeds = sorted(set(variant) & set(base))
    if not seeds:
        return None
    differences = [variant[s] - base[s] for s in seeds]
    mean, half = t_interval(differences)
    above = sum(d > 1e-12 for d in differences)
    below = sum(d < -1e-12 for d in differences)
    return PairedDifference(seeds, mean, half, above, below, len(seeds) - above - below)


def first_batch_reaching(curve: dict[int, float], threshold: float, window: int = 3) -> int | None:
    """Return the first batch whose moving mean (that batch and the `window` − 1 logged batches before it)
    reaches `threshold`, or None if none does; `curve` maps generated batch → value."""
    batches = sorted(curve)
    for i in range(window - 1, len(batches)):
        if statistics.fmean(curve[b] for b in batches[i - window + 1 : i + 1]) >= threshold:
            return batches[i]
    return None
