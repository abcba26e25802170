"""Studies: every variant × seed of one recipe trained, evaluated on one held-out set, and compared.

The entry point is `run_study(config, overrides, CompareConfig(...), out, argv)`, what `lopti compare` calls: it
runs the study (or a grid of them), resuming where it stopped, and writes its reports. Its parts:

- `study`: the runs of a study (each variant's settings) and the folder that holds them;
- `jobs`: runs dispatched to an executor (local processes, or Ray when installed), each run once;
- `grid`: a study repeated at each value of train settings;
- `statistics`: paired differences with exact tests, bootstrap intervals, Holm, power, Fisher (scipy.stats);
- `compare_report`, `compare_training`: results.md, its tables and curves.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompareConfig", "run_study"]


def __getattr__(name: str) -> Any:
    # lazy: importing the statistics must not load TRL, which running a study needs
    if name in __all__:
        from lopti.experiments import compare

        return getattr(compare, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
