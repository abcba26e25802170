"""`lopti compare`: the ablation study (docs/paper.md §8) — every variant × seed, evaluated on one held-out set.

A variant is any method name of `lopti.core.methods` (`grpo`, `ar`, `lopti`, `ar+lopti`, the token-credit
presets such as `stapo`, `entropy20`, `clip_cov`, and combinations such as `ar+stapo`), or one of Lopti's
controls, `grpo2` (two passes per batch on every token) and `lopti_random` (two passes on a random split
of Lopti's sizes); `lopti.experiments.study` builds each run's settings. The base estimator is the recipe's
(GRPO, or REINFORCE++ with `advantage_estimator: reinforce_pp`). Seeds change the trainer seed (sampling);
the data and the held-out set stay fixed.

The results folder holds plan.json when the study was registered first (`--register`, `lopti.experiments.plan`:
a later run whose plan differs is refused), compare.json (what is compared; a folder of other settings is
refused), runs/<variant>-s<seed>/ (ordinary run folders: a finished run is skipped, an interrupted one resumed:
it trains only the steps it had left and writes only the outputs it lacks), threads.json (the torch thread
count of each run), results.json (every run's numbers), results.md (mean ± std over seeds per group, gain over
the base, paired tests: `lopti.experiments.paired_tables`) and curves.png (training curves with ± std
bands). `--grid` sweeps a train setting over such folders (`lopti.experiments.grid`); `--jobs` runs several
runs at once, on the local machine or with `--backend ray` across a Ray cluster (`lopti.experiments.jobs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopti.core.methods import PAPER_METHODS
from lopti.errors import check_number
from lopti.experiments.grid import parse_grid, run_grid
from lopti.experiments.jobs import BACKENDS, run_jobs, threads_per_run
from lopti.experiments.plan import METRICS, check_registered, register, study_plan
from lopti.experiments.study import (
    PLAN_FILE,
    STUDY_FILE,
    claim_study,
    collect,
    plan_runs,
    study_base,
    train_keeping_records,
    train_settings,
)
from lopti.files import folder_lock


@dataclass
class CompareConfig:
    """What `lopti compare` runs; its other settings are `lopti train`'s, applied to every run."""

    variants: list[str] = field(
        default_factory=lambda: list(PAPER_METHODS),
        metadata={
            "help": "Methods to compare: grpo, ar, lopti, ar+lopti, a token-credit preset (stapo, entropy20, "
            "clip_cov, ...; docs/guides/token-credit.md), parts joined with '+' (ar+stapo), or Lopti's controls grpo2 "
            "(two passes per batch on every token) and lopti_random (a random split of Lopti's sizes; also "
            "ar+lopti_random). A variant's presets replace the recipe's token_credit; the recipe's ar_alpha (where "
            "it has none, or 0: the task's own) and preset constants are kept."
        },
    )
    seeds: list[int] = field(
        default_factory=lambda: [0, 1, 2],
        metadata={"help": "Trainer seeds (sampling); the data and the held-out set stay the same."},
    )
    out: str | None = field(default=None, metadata={"help": "Results folder (null: results/RECIPE)."})
    grid: str | None = field(
        default=None,
        metadata={
            "help": "Sweep lopti train settings: KEY=V1,V2,... (e.g. learning_rate=1e-4,3e-4,1e-3); several keys "
            "joined with ';' sweep every combination. Each point is an ordinary comparison in OUT/KEY=VALUE/; "
            "grid.md, grid.json and grid.png summarise them."
        },
    )
    jobs: int = field(
        default=1,
        metadata={
            "help": "Runs trained at once, each in its own process (its output in its run folder's train.log). "
            "Each uses max(1, torch threads // jobs) threads unless --threads says otherwise.",
        },
    )
    backend: str = field(
        default="local",
        metadata={
            "help": "Where --jobs runs go: local (worker processes here) or ray (Ray tasks, each reserving "
            "its thread count in CPUs; a local Ray is started unless RAY_ADDRESS names a cluster).",
            "choices": BACKENDS,
        },
    )
    register: bool = field(
        default=False,
        metadata={
            "help": "Register the study instead of running it: write OUT/plan.json (variants, seeds, data and "
            "held-out set, primary comparisons and metric, test, alpha, correction, exclusion and collapse rules) "
            "with its hash. A later run of a registered study whose plan changed is refused; results.md cites the "
            "hash."
        },
    )
    primary: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Primary comparisons of a registered study, VARIANT:BASE (lopti:grpo2,lopti:lopti_random); "
            "none: every variant against grpo. Holm's correction runs over them."
        },
    )
    primary_metric: str = field(
        default="greedy",
        metadata={
            "help": "Held-out score the primary comparisons test: greedy (accuracy), sampled (avg@k accuracy) or "
            "pass@k (of the sampled evaluation).",
            "choices": METRICS,
        },
    )
    alpha: float = field(
        default=0.05,
        metadata={"help": "Family-wise error level of the primary comparisons (after Holm)."},
    )
    keep_weights: bool = field(
        default=True,
        metadata={
            "help": "Keep each run's final/ weights and checkpoints. false: delete them once the run has finished "
            "and written its report (its records stay; a SmolLM2-135M run keeps about 2 GB otherwise).",
        },
    )
    threads: int = field(
        default=0,
        metadata={
            "help": "Torch threads per run; 0: torch's default with --jobs 1, else its share. The thread count "
            "changes the floating-point summation order, so results match only at equal counts; each run's count "
            "is kept in threads.json and reused when it is resumed.",
        },
    )
    _argument_group_name = "CompareConfig (lopti): the study; every lopti train setting below applies to each run"

    def __post_init__(self) -> None:
        check_number("jobs", self.jobs, low=1)
        check_number("alpha", self.alpha, above=0, high=0.5)
        check_number("threads", self.threads, low=0)


def run_all(
    config: str | Path,
    overrides: dict[str, Any],
    variants: list[str],
    seeds: list[int],
    out: Path,
    jobs: int = 1,
    threads: int = 0,
    runner: Callable[[dict[str, Any]], Any] | None = None,
    backend: str = "local",
    plan: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    keep_weights: bool = True,
) -> None:
    """Train and evaluate every variant × seed in `out`, skipping finished runs and resuming others.

    `out` stays locked meanwhile, so a second comparison into it stops at once. `runner` trains one run
    from its settings (default `train_settings`, or `train_keeping_records` without `keep_weights`; with jobs > 1
    or Ray it must be importable by the workers).
    `plan` makes the study's plan from its base settings: a folder registered with another plan is refused.
    """
    base = study_base(config, overrides, variants)  # bad settings fail before anything is written
    with folder_lock(out):
        if plan is not None:
            check_registered(out, plan(base))
        claim_study(out, base, variants, seeds)
        pending = plan_runs(out, base, variants, seeds, threads_per_run(jobs, threads))
        run_jobs(pending, jobs, runner or (train_settings if keep_weights else train_keeping_records), backend)


def run_study(config: Path, overrides: dict[str, Any], study: CompareConfig, out: Path, argv: list[str]) -> str:
    """Run `lopti compare` (a comparison, or a grid of them with study.grid), write its reports; return its table."""
    import shlex

    from lopti.experiments.compare_report import results_table, write_compare_report

    command = "lopti compare " + shlex.join(argv)
    if study.grid:
        if study.register:
            raise ValueError("--register: register each grid point's study on its own (--out OUT/KEY=VALUE)")
        grid = parse_grid(study.grid, overrides)
        return run_grid(config, overrides, grid, study, out, argv)

    def plan(base: dict[str, Any]) -> dict[str, Any]:
        return study_plan(base, study.variants, study.seeds, study.primary, study.primary_metric, study.alpha)

    if study.register:
        base = study_base(config, overrides, study.variants)
        with folder_lock(out):
            digest = register(out, plan(base))
        return f"Registered plan {digest} in {out / PLAN_FILE}; commit it, then run this command without --register."
    run_all(
        config,
        overrides,
        study.variants,
        study.seeds,
        out,
        study.jobs,
        study.threads,
        backend=study.backend,
        plan=plan,
        keep_weights=study.keep_weights,
    )
    results = collect(out)
    write_compare_report(out, results, command, json.loads((out / STUDY_FILE).read_text())["base"])
    return results_table(results)
