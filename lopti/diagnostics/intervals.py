"""95% confidence intervals over independent batches: Student's t on the per-batch values.

With 4 to 8 batches the normal 1.96 would be too narrow (t is 3.18 for 4 batches), so the t quantile is
computed here from the t density (no scipy in the dependencies): Simpson's rule on [0, x] and bisection.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

LEVEL = 0.95


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """Return the p-quantile (p > 0.5) of Student's t with `df` degrees of freedom, to about 1e-9."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df ≥ 1, got p={p}, df={df}")
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def density(x: float) -> float:
        return scale * (1 + x * x / df) ** (-(df + 1) / 2)

    def upper_half_mass(x: float, steps: int = 2000) -> float:  # ∫_0^x density, Simpson's rule
        h = x / steps
        inner = sum((4 if k % 2 else 2) * density(k * h) for k in range(1, steps))
        return h / 3 * (density(0.0) + inner + density(x))

    low, high = 0.0, 1.0
    while upper_half_mass(high) < p - 0.5:  # heavy tails (df = 1: x ≈ 12.7 for p = 0.975)
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if upper_half_mass(middle) < p - 0.5 else (low, middle)
    return (low + high) / 2


def interval(values: list[float | None]) -> dict[str, Any]:
    """Return the mean of the defined values with its 95% t interval (None bounds below two values).

    `batches` counts the values that entered; a None (a batch without tokens of that kind) is left out.
    """
    kept = [v for v in values if v is not None]
    if not kept:
        return {"mean": None, "low": None, "high": None, "batches": 0}
    mean = statistics.fmean(kept)
    if len(kept) < 2:
        return {"mean": mean, "low": None, "high": None, "batches": 1}
    half = t_quantile(0.5 + LEVEL / 2, len(kept) - 1) * statistics.stdev(kept) / math.sqrt(len(kept))
    return {"mean": mean, "low": mean - half, "high": mean + half, "batches": len(kept)}


def paired_differences(values: list[float | None], baseline: list[float | None]) -> list[float | None]:
    """Return value − baseline per batch (None where either is undefined): pairing removes batch-to-batch spread."""
    return [None if a is None or b is None else a - b for a, b in zip(values, baseline, strict=True)]
