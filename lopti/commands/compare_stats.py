"""The statistics of `lopti compare`'s results.md: t-intervals over seeds, paired differences, threshold batches.

Pure functions of numbers; compare_report reads the runs and renders the tables.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Student t's quantiles for 1..30 degrees of freedom, to six decimals: 0.975 (a two-sided 95% interval) and 0.80
# (80% power), each with the normal's quantile that the expansion beyond 30 starts from
T_QUANTILES = {
    0.975: (1.959964, (
        12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
        2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
        2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
    )),
    0.80: (0.841621, (
        1.376382, 1.060660, 0.978472, 0.940965, 0.919544, 0.905703, 0.896030, 0.888890, 0.883404, 0.879058,
        0.875530, 0.872609, 0.870152, 0.868055, 0.866245, 0.864667, 0.863279, 0.862049, 0.860951, 0.859964,
        0.859074, 0.858266, 0.857530, 0.856855, 0.856236, 0.855665, 0.855137, 0.854647, 0.854192, 0.853767,
    )),
}  # fmt: skip


def t_quantile(probability: float, df: int) -> float:
    """Return Student t's `probability` quantile (0.975 or 0.80) at `df` degrees of freedom.

    Exact (to six decimals) up to 30 from the table; beyond, the Cornish-Fisher expansion
    z + (z³ + z) / 4df + (5z⁵ + 16z³ + 3z) / 96df², within 1e-4 of the quantile from df 31 on."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    z, table = T_QUANTILES[probability]
    if df <= len(table):
        return table[df - 1]
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_interval(values: list[float]) -> tuple[float, float | None]:
    """Return the mean of `values` and the half-width of its 95% Student t-interval over them,
    t(0.975, n − 1) · s / √n with s the sample standard deviation; None for a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class PairedDifference:
    """A variant's held-out accuracy minus the base's, seed by seed, on the seeds both have."""

    seeds: list[int]
    mean: float
    half_width: float | None  # of the 95% t-interval; None with a single seed
    above: int
    below: int
    equal: int
    detectable: float | None  # the smallest true difference found at 80% power; None with a single seed

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
    return PairedDifference(seeds, mean, half, above, below, len(seeds) - above - below, detectable(differences))


def detectable(differences: list[float]) -> float | None:
    """Return the smallest true mean difference a paired t-test of this many seeds finds 80% of the time
    (two-sided, 5%), taking the differences' spread as the true one: (t(0.975, n − 1) + t(0.80, n − 1)) · s / √n.
    None for a single difference. What a study of these seeds could have seen, not what it saw."""
    if len(differences) < 2:
        return None
    df = len(differences) - 1
    return (t_quantile(0.975, df) + t_quantile(0.80, df)) * statistics.stdev(differences) / math.sqrt(df + 1)


def first_batch_reaching(curve: dict[int, float], threshold: float, window: int = 3) -> int | None:
    """Return the first batch whose moving mean (that batch and the `window` − 1 logged batches before it)
    reaches `threshold`, or None if none does; `curve` maps generated batch → value."""
    batches = sorted(curve)
    for i in range(window - 1, len(batches)):
        if statistics.fmean(curve[b] for b in batches[i - window + 1 : i + 1]) >= threshold:
            return batches[i]
    return None
