"""Checks shared by the tasks' data generators."""

from __future__ import annotations


def check_counts(**counts: int) -> None:
    """Raise a ValueError naming the first count (items per K&K size or math level) that is not a whole number ≥ 0.

    A negative count used to give empty files and exit status 0.
    """
    for name, count in counts.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"{name} must be a whole number ≥ 0 (per size or level), got {count!r}")
