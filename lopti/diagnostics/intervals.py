"""95% confidence intervals of a mean over independent values (batches, seeds): Student's t, from scipy.stats.

With 4 to 8 values the normal 1.96 would be too narrow (t is 3.18 for 4 values), hence t.
"""

from __future__ import annotations

import statistics
from typing import Any

from scipy import stats

LEVEL = 0.95


def interval(values: list[float | None], level: float = LEVEL) -> dict[str, Any]:
    """Return the mean of the defined values with its t interval (None bounds below two values).

    `batches` counts the values that entered; a None (a batch without tokens of that kind) is left out.
    """
    kept = [v for v in values if v is not None]
    if not kept:
        return {"mean": None, "low": None, "high": None, "batches": 0}
    mean = statistics.fmean(kept)
    if len(kept) < 2:
        return {"mean": mean, "low": None, "high": None, "batches": 1}
    spread = statistics.stdev(kept) / len(kept) ** 0.5
    low, high = (mean, mean) if spread == 0 else stats.t.interval(level, len(kept) - 1, loc=mean, scale=spread)
    return {"mean": mean, "low": float(low), "high": float(high), "batches": len(kept)}


def paired_differences(values: list[float | None], baseline: list[float | None]) -> list[float | None]:
    """Return value − baseline per batch (None where either is undefined): pairing removes batch-to-batch spread."""
    return [None if a is None or b is None else a - b for a, b in zip(values, baseline, strict=True)]
