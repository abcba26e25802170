"""A dose–response study: the same recipe at several strengths of one setting (AR's α), the same seeds at each.

The primary statistic is each seed's least-squares slope of the outcome on the dose, Σᵢ cᵢ·yᵢ with
cᵢ = (dᵢ − d̄) / Σⱼ (dⱼ − d̄)²: a contrast of the seed's runs, so whatever a seed shares across doses (its
rollouts' luck, the held-out problems it finds easy) cancels. Over seeds it gets the tests of a paired difference
(`statistics.paired_difference`): the exact sign-flip test, a bootstrap interval over seeds and held-out problems,
and the slope detectable at 80% power. Each dose against the lowest is a paired difference too, Holm-corrected
over the doses. Only seeds with a finished run at every dose enter the slope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lopti.experiments.statistics import PairedDifference, Scores, detectable_difference, holm, paired_difference


def slope_weights(doses: Sequence[float]) -> np.ndarray:
    """Return the contrast cᵢ whose sum Σ cᵢ·yᵢ is the least-squares slope of y on the doses."""
    centred = np.asarray(doses, dtype=float) - np.mean(doses)
    spread = float(centred @ centred)
    if spread == 0:
        raise ValueError(f"a slope needs two different doses, got {list(doses)}")
    return centred / spread


def slopes_by_seed(scores: Mapping[float, Mapping[int, Scores]]) -> dict[int, Scores]:
    """Return each seed's slope of its scores on the dose (per held-out problem where the scores are arrays), for
    the seeds that have a score at every dose. `scores` maps dose → seed → scores."""
    doses = sorted(scores)
    weights = slope_weights(doses)
    seeds = sorted(set.intersection(*(set(scores[dose]) for dose in doses)))
    return {
        seed: sum(w * np.asarray(scores[d][seed], float) for w, d in zip(weights, doses, strict=True)) for seed in seeds
    }


@dataclass(frozen=True)
class DoseResponse:
    """The slope over seeds and each dose against the lowest, with Holm-adjusted p-values in dose order."""

    doses: list[float]
    slope: PairedDifference | None  # per unit of dose; None without a seed finished at every dose
    against_lowest: dict[float, PairedDifference | None]
    holm_p: dict[float, float | None]


def dose_response(scores: Mapping[float, Mapping[int, Scores]], problems: int | None = None) -> DoseResponse:
    """Return the slope test and the per-dose comparisons of `scores` (dose → seed → per-problem scores or
    accuracy; `problems` is the held-out set's size where only accuracies are known)."""
    doses = sorted(scores)
    slopes = slopes_by_seed(scores)
    zeros = {seed: np.zeros_like(np.asarray(value, float)) for seed, value in slopes.items()}
    slope = paired_difference(slopes, zeros, problems) if slopes else None
    against = {dose: paired_difference(scores[dose], scores[doses[0]], problems) for dose in doses[1:]}
    adjusted = holm([None if result is None else result.p_value for result in against.values()])
    return DoseResponse(doses, slope, against, dict(zip(against, adjusted, strict=True)))


def detectable_slope(pair_spread: float, doses: Sequence[float], seeds: int) -> float | None:
    """Return the slope (per unit of dose) that `seeds` seeds detect at 80% power, when two runs of one seed at
    different doses differ with standard deviation `pair_spread` and the runs are exchangeable within a seed: a
    contrast c then has standard deviation pair_spread · ‖c‖ / √2."""
    weights = slope_weights(doses)
    return detectable_difference(pair_spread * float(np.linalg.norm(weights)) / np.sqrt(2), seeds)
