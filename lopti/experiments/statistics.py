"""The statistics of a study, on scipy.stats: paired differences over seeds, their exact test, intervals that
carry the held-out set's sampling error, Holm's correction, power, and Fisher's test for binary outcomes.

Why these and not a t-interval on five numbers:
- Outcomes over seeds are often bimodal (a run switches modes or it does not), so the paired test is the
  exact sign-flip permutation test of the mean difference: under "no difference", each seed's difference is
  as likely positive as negative, and all 2ⁿ sign patterns are enumerated (n ≤ EXACT_SEEDS). With n seeds the
  smallest two-sided p it can give is 2 / 2ⁿ: five seeds can never reach 0.05 (`smallest_p`).
- Every run is scored on the same finite held-out set, whose sampling error a spread over seeds does not see
  (900 puzzles at 45% carry ±1.7 points by themselves), so the interval is a bootstrap over seeds and problems.
- A table tests many variants at once; Holm's step-down correction keeps its family-wise error at α.
- What a study could have seen is the smallest true difference its test finds at 80% power.

A mean over seeds gets Student's t interval from `lopti.diagnostics.intervals.interval` (also on scipy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.80
LEVEL = 0.95
EXACT_SEEDS = 20  # 2^20 sign patterns: exact enumeration up to here, Monte Carlo beyond
RANDOM_SIGN_PATTERNS = 100_000
BOOTSTRAP_RESAMPLES = 10_000
TIE = 1e-12  # differences within this of 0 count as equal

# per run: an array of per-problem scores (the same problems in the same order for every run), or its
# accuracy alone when the run kept no per-problem records
Scores = np.ndarray | float


def sign_flip_p(differences: Sequence[float]) -> float:
    """Return the two-sided sign-flip permutation p-value of the mean of paired `differences` (one per seed): the
    share of sign patterns whose |mean| reaches the observed one.

    Exact (all 2ⁿ patterns) for n ≤ EXACT_SEEDS, else from RANDOM_SIGN_PATTERNS random patterns (scipy)."""
    values = np.asarray(differences, dtype=float)
    if len(values) < 1:
        raise ValueError("a sign-flip test needs at least one difference")
    if len(values) < 2 or not np.any(np.abs(values) > TIE):  # one seed: both sign patterns are as extreme
        return 1.0
    if len(values) <= EXACT_SEEDS:
        return _exact_sign_flip_p(values)
    result = stats.permutation_test(
        (values,),
        np.mean,
        permutation_type="samples",  # with one sample: flip the signs of its observations
        n_resamples=RANDOM_SIGN_PATTERNS,
        vectorized=True,
        rng=np.random.default_rng(0),
    )
    return float(result.pvalue)


def _exact_sign_flip_p(values: np.ndarray) -> float:
    """Return the exact two-sided sign-flip p-value by meeting in the middle: the 2^(n/2) signed sums of each
    half, sorted, give the count of the 2ⁿ total sums with |sum| ≥ |observed| in milliseconds, where scipy's
    enumeration of the 2ⁿ patterns takes half a minute at 20 seeds."""

    def signed_sums(part: np.ndarray) -> np.ndarray:
        signs = 1 - 2 * ((np.arange(2 ** len(part))[:, None] >> np.arange(len(part))) & 1)
        return signs @ part

    half = len(values) // 2
    left, right = np.sort(signed_sums(values[:half])), signed_sums(values[half:])
    reach = abs(values.sum()) - 1e-9 * np.abs(values).sum()  # sums equal but for rounding count as reaching
    if reach <= 0:  # a mean of 0: every pattern is as extreme
        return 1.0
    at_least = len(left) - np.searchsorted(left, reach - right, side="left")
    at_most = np.searchsorted(left, -reach - right, side="right")
    return float((at_least + at_most).sum() / 2 ** len(values))


def smallest_p(seeds: int) -> float:
    """Return the smallest two-sided p-value the exact sign-flip test can reach with `seeds` paired seeds:
    every difference on the same side, 2 of the 2ⁿ sign patterns as extreme."""
    return min(1.0, 2 / 2**seeds)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Return Holm's step-down adjusted p-values, in the given order (None stays None and is not counted).

    The i-th smallest of m p-values is multiplied by m − i + 1, and an adjusted value is never below the one
    before it: rejecting where the adjusted p ≤ α keeps the chance of any false rejection in the family ≤ α."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def detectable_difference(spread: float, seeds: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Return the smallest true mean difference a two-sided paired t-test of `seeds` seeds rejects with
    probability `power`, when the differences' standard deviation is `spread` (noncentral t); None below two
    seeds or without spread. The sign-flip test needs at least this much, and nothing at all when
    `smallest_p(seeds)` exceeds α."""
    if seeds < 2 or spread <= 0:
        return None
    df = seeds - 1
    critical = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(effect: float) -> float:
        shift = effect * math.sqrt(seeds) / spread
        wrong_side = np.nan_to_num(stats.nct.cdf(-critical, df, shift))  # NaN where it underflows
        return stats.nct.sf(critical, df, shift) + wrong_side - power

    high = spread
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10 * spread))


def bootstrap_interval(
    variant: Mapping[int, Scores],
    base: Mapping[int, Scores],
    problems: int | None = None,
    level: float = LEVEL,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Return the percentile bootstrap interval of mean(variant − base) over the seeds both have, resampling
    the seeds and the held-out problems.

    With per-problem scores, one resample draws seeds and problems with replacement, the same problems for
    every run (they share the held-out set), so a problem that is easy for every run adds no spread. With
    accuracies only (or when one arm lacks the scores), each resample shifts every run of an arm by one binomial
    redraw of the arm's mean accuracy over `problems` problems (the set is shared, so its error is common to the
    seeds), independently for the two arms: without the records the pairing on problems is unknown, and leaving
    it out makes the interval wider when the arms find the same problems hard, which they do."""
    seeds = sorted(set(variant) & set(base))
    if not seeds:
        raise ValueError("the two arms share no seed")
    rng = np.random.default_rng(seed)
    if all(isinstance(variant[s], np.ndarray) and isinstance(base[s], np.ndarray) for s in seeds):
        differences = np.stack([np.asarray(variant[s], float) - np.asarray(base[s], float) for s in seeds])
        count = differences.shape[1]
        per_seed = np.concatenate([  # chunks keep the resamples × problems weights small
            rng.multinomial(count, np.full(count, 1 / count), size=chunk) @ differences.T / count
            for chunk in np.diff(np.r_[0:resamples:1000, resamples])
        ])  # fmt: skip
    else:
        if problems is None:
            raise ValueError("accuracies without per-problem scores need the number of problems")
        accuracies = np.array([[np.mean(variant[s]), np.mean(base[s])] for s in seeds])
        set_means = accuracies.mean(axis=0)
        # one redrawn held-out set per resample, shared by the seeds of an arm: its error does not average out
        shifts = rng.binomial(problems, set_means, size=(resamples, 2)) / problems - set_means
        per_seed = (accuracies[:, 0] - accuracies[:, 1])[None, :] + (shifts[:, 0] - shifts[:, 1])[:, None]
    picks = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
    means = np.take_along_axis(per_seed, picks, axis=1).mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedDifference:
    """A variant's score minus the base's, seed by seed, on the seeds both have."""

    seeds: list[int]
    mean: float
    over_seeds: tuple[float, float] | None  # bootstrap interval resampling the seeds; None with a single seed
    over_problems: tuple[float, float] | None  # resampling seeds and held-out problems; None when n is unknown
    p_value: float  # exact sign-flip, two-sided
    above: int
    below: int
    equal: int
    detectable: float | None  # smallest true difference a paired test finds at 80% power; None with one seed


def paired_difference(
    variant: Mapping[int, Scores], base: Mapping[int, Scores], problems: int | None = None, seed: int = 0
) -> PairedDifference | None:
    """Return variant[s] − base[s] over the seeds s both have: mean, bootstrap intervals over the seeds and over
    seeds and held-out problems (`bootstrap_interval`; the latter needs per-problem scores or `problems`), exact
    sign-flip p, signs and the detectable difference; None when they share no seed."""
    seeds = sorted(set(variant) & set(base))
    if not seeds:
        return None
    differences = [float(np.mean(variant[s]) - np.mean(base[s])) for s in seeds]
    above = sum(d > TIE for d in differences)
    below = sum(d < -TIE for d in differences)
    over_seeds = over_problems = detectable = None
    if len(seeds) > 1:
        as_scores = {s: np.array([d]) for s, d in zip(seeds, differences, strict=True)}
        over_seeds = bootstrap_interval(as_scores, {s: np.zeros(1) for s in seeds}, seed=seed)
        if problems is not None or isinstance(variant[seeds[0]], np.ndarray):
            over_problems = bootstrap_interval(variant, base, problems, seed=seed)
        detectable = detectable_difference(float(np.std(differences, ddof=1)), len(seeds))
    return PairedDifference(
        seeds, float(np.mean(differences)), over_seeds, over_problems, sign_flip_p(differences), above, below,
        len(seeds) - above - below, detectable,
    )  # fmt: skip


def fisher_p(hits: int, runs: int, base_hits: int, base_runs: int) -> float:
    """Return Fisher's exact two-sided p-value that a binary outcome (a run collapsed, switched modes) is as
    frequent in `runs` as in `base_runs`, from the counts of runs where it happened."""
    if not (0 <= hits <= runs and 0 <= base_hits <= base_runs):
        raise ValueError(f"counts out of range: {hits}/{runs}, {base_hits}/{base_runs}")
    table = [[hits, runs - hits], [base_hits, base_runs - base_hits]]
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


def first_batch_reaching(curve: dict[int, float], threshold: float, window: int = 3) -> int | None:
    """Return the first batch whose moving mean (that batch and the `window` − 1 logged batches before it)
    reaches `threshold`, or None if none does; `curve` maps generated batch → value."""
    batches = sorted(curve)
    for i in range(window - 1, len(batches)):
        if np.mean([curve[b] for b in batches[i - window + 1 : i + 1]]) >= threshold:
            return batches[i]
    return None
