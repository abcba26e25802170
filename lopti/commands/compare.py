"""`lopti compare`: the ablation study (docs/paper.md §8) — every variant × seed, evaluated on one held-out set.

Variants change only the method; a variant is any method name of `lopti.core.methods` (`grpo`, `ar`,
`lopti`, `ar+lopti`, the token-credit presets such as `stapo`, `entropy20`, `clip_cov`, and combinations
such as `ar+stapo`), or one of Lopti's controls, `grpo2` (two passes per batch on every token) and
`lopti_random` (two passes on a random split of Lopti's sizes). All see the same number of generated
batches (RL steps), as in the paper: Lopti and its controls make two update passes per batch, so their
runs take twice the optimizer steps of the others. The base
estimator is the recipe's (GRPO, or REINFORCE++ with `advantage_estimator: reinforce_pp`). Seeds change
the trainer seed (sampling); the data and the held-out set stay fixed.

The results folder holds compare.json (what is compared; a folder of other settings is refused),
runs/<variant>-s<seed>/ (ordinary run folders: a finished run is skipped, an interrupted one resumed:
it trains only the steps it had left and writes only the outputs it lacks), threads.json (the torch
thread count of each run), results.json (every run's numbers), results.md (mean ± std over seeds per
group, gain over the base) and curves.png (training curves with ± std bands). `--grid` sweeps a train
setting over such folders (`lopti.commands.grid`); `--jobs` runs several runs at once
(`lopti.commands.jobs`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopti.commands.checkpoints import last_complete_checkpoint
from lopti.commands.files import LOCK_NAME, folder_lock, write_atomic
from lopti.commands.jobs import Job, run_jobs, threads_per_run
from lopti.commands.settings import resolve, split
from lopti.core.constants import AR_ALPHA_KK  # AR's α when the base recipe has none
from lopti.core.credit_presets import credit_problems
from lopti.core.methods import PAPER_METHODS, MethodSpec, parse_method

VARIANTS = PAPER_METHODS
THREADS_FILE = "threads.json"


@dataclass
class CompareConfig:
    """What `lopti compare` runs; its other settings are `lopti train`'s, applied to every run."""

    config: str | None = field(default=None, metadata={"help": "Base recipe (null: the embedded kk-tiny-cpu.yaml)."})
    variants: list[str] = field(
        default_factory=lambda: list(VARIANTS),
        metadata={
            "help": "Methods to compare: grpo, ar, lopti, ar+lopti, a token-credit preset (stapo, entropy20, "
            "clip_cov, ...; docs/token-credit.md), parts joined with '+' (ar+stapo), or Lopti's controls grpo2 "
            "(two passes per batch on every token) and lopti_random (a random split of Lopti's sizes; also "
            "ar+lopti_random). A variant's presets replace the recipe's token_credit; the recipe's ar_alpha and "
            "preset constants are kept."
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
            "min": 1,
        },
    )
    threads: int = field(
        default=0,
        metadata={
            "help": "Torch threads per run; 0: torch's default with --jobs 1, else its share. The thread count "
            "changes the floating-point summation order, so results match only at equal counts; each run's count "
            "is kept in threads.json and reused when it is resumed.",
            "min": 0,
        },
    )


def _credit_constants(base: dict[str, Any], spec: MethodSpec) -> dict[str, dict[str, float]]:
    """Return the recipe's constants of the variant's presets, overridden by the ones the variant's name sets."""
    given = base.get("token_credit_kwargs") or {}
    if isinstance(given, str):  # the JSON string form that LoptiGRPOConfig also takes
        given = json.loads(given)
    return {name: dict(given[name]) for name in spec.token_credit if name in given} | spec.token_credit_kwargs


def variant_settings(base: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    """Return the settings of one run: the base recipe with the variant's method and the seed."""
    try:
        spec = parse_method(variant)
    except ValueError as error:
        raise ValueError(f"--variants: {error}") from None
    passes = int(base.get("num_iterations", 1)) if base.get("lopti") else 1
    batches, rhythm = int(base["max_steps"]) // passes, int(base.get("save_steps", 0)) // passes
    alpha = float(base.get("ar_alpha") or AR_ALPHA_KK) if spec.ar else 0.0
    settings = {
        **base,
        "ar_alpha": alpha,
        "lopti": spec.lopti,
        "num_iterations": 2 if spec.lopti else 1,
        "max_steps": batches * (2 if spec.lopti else 1),
        "seed": seed,
        "evaluate": True,
    }
    if rhythm:
        settings["save_steps"] = rhythm * (2 if spec.lopti else 1)
    if spec.lopti_split != "probability" or "lopti_split" in base:  # the paper's variants keep their settings
        settings["lopti_split"] = spec.lopti_split
    # written only when a preset is involved, so the paper's four variants keep the settings they always had
    if spec.token_credit or "token_credit" in base or "token_credit_kwargs" in base:
        settings["token_credit"] = list(spec.token_credit)
        settings["token_credit_kwargs"] = _credit_constants(base, spec)
    return settings


def check_variants(base: dict[str, Any], variants: list[str]) -> None:
    """Raise a ValueError (one line) for a bad or repeated variant, before anything is written."""
    repeated = sorted({v for v in variants if variants.count(v) > 1})
    if repeated:
        raise ValueError(f"--variants: {', '.join(repeated)} listed twice")
    for variant in variants:
        settings = variant_settings(base, variant, 0)
        split(settings)  # the run's settings as a whole: types and bounds
        problems = credit_problems(
            settings.get("token_credit", []), settings.get("token_credit_kwargs", {}), settings["ar_alpha"]
        )
        if problems:
            raise ValueError(f"--variants {variant}: " + "; ".join(problems))


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


# A study may gain variants and seeds later: each run depends only on the base settings, its variant and
# its seed, so the runs already there stay valid and the reports cover the union.
GROWABLE = ("variants", "seeds")


def study_identity(base: dict[str, Any], variants: list[str], seeds: list[int]) -> dict[str, Any]:
    """Return what compare.json records: what a folder's runs are, so that another study is refused."""
    return {"base": base, "variants": variants, "seeds": seeds}


def claim_folder(
    out: Path, identity: dict[str, Any], name: str = "compare.json", allowed: frozenset[str] | set[str] = frozenset()
) -> None:
    """Write `name` (compare.json) in `out`, or check that the one there describes the same study.

    An existing folder without it is refused unless it holds only the lock and the entries `allowed`.
    Keys stored besides the identity's ("results" of grid.json) are not compared; variants and seeds not yet
    recorded are added (GROWABLE), so a later command can extend a study.
    """
    path = out / name
    if path.exists():
        stored = json.loads(path.read_text())
        differing = sorted(
            k for k in (set(stored) | set(identity)) - {"results", *GROWABLE} if stored.get(k) != identity.get(k)
        )
        if differing:
            what = "grid" if name == "grid.json" else "comparison"
            raise ValueError(
                f"{out} holds a {what} with other settings ({', '.join(differing)} differ); "
                "choose another --out or delete it"
            )
        grown = {k: stored[k] + [v for v in identity[k] if v not in stored[k]] for k in GROWABLE if k in identity}
        if any(grown[k] != stored[k] for k in grown):
            write_atomic(path, json.dumps(stored | grown, indent=1, sort_keys=True))
        return
    if out.exists() and any(p.name not in {LOCK_NAME, *allowed} for p in out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no lopti {name.removesuffix('.json')}; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(identity, indent=1, sort_keys=True))


def train_settings(settings: dict[str, Any]) -> None:
    """Train one run of a study from its settings (the runner of `run_jobs`)."""
    from lopti.commands.train_run import train

    run, trainer_kwargs = split(settings)
    train(run, trainer_kwargs, settings)


def plan_runs(
    out: Path, base: dict[str, Any], variants: list[str], seeds: list[int], threads: int, prefix: str = ""
) -> list[Job]:
    """Return the runs of a claimed folder left to train (finished ones are skipped), each with its thread count.

    A run keeps the thread count recorded in threads.json when it was first started, so a resumed run stays
    on its floating-point path; the others get `threads`, recorded before they start.
    """
    from lopti.commands.train_run import run_outputs

    threads_path = out / THREADS_FILE
    recorded = json.loads(threads_path.read_text()) if threads_path.exists() else {}
    jobs = []
    for variant in variants:
        for seed in seeds:
            name = run_name(variant, seed)
            run_dir = out / "runs" / name
            if all((run_dir / output).is_file() for output in run_outputs(evaluate=True)):
                print(f"{prefix}{name}: finished, skipped")
                continue
            settings = variant_settings(base, variant, seed) | {"output_dir": str(run_dir)}
            settings["resume"] = last_complete_checkpoint(run_dir) is not None
            recorded.setdefault(name, threads)
            jobs.append(Job(f"{prefix}{name}", settings, recorded[name], run_dir / "train.log"))
    if jobs:
        write_atomic(threads_path, json.dumps(recorded, indent=1, sort_keys=True))
    return jobs


def run_all(
    config: str | Path,
    overrides: dict[str, Any],
    variants: list[str],
    seeds: list[int],
    out: Path,
    jobs: int = 1,
    threads: int = 0,
    runner: Callable[[dict[str, Any]], Any] | None = None,
) -> None:
    """Train and evaluate every variant × seed in `out`, skipping finished runs and resuming others.

    `out` stays locked meanwhile, so a second comparison into it stops at once. `runner` trains one run
    from its settings (default `train_settings`; with jobs > 1 it must be importable by the workers).
    """
    base = resolve(config, overrides)
    check_variants(base, variants)  # bad variants fail before anything is written
    with folder_lock(out):
        claim_folder(out, study_identity(base, variants, seeds))
        pending = plan_runs(out, base, variants, seeds, threads_per_run(jobs, threads))
        run_jobs(pending, jobs, runner or train_settings)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Return the mean and the sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def collect(out: Path) -> dict[str, Any]:
    """Return every finished run's held-out results and the per-variant mean ± std; write results.json."""
    identity = json.loads((out / "compare.json").read_text())
    threads_path = out / THREADS_FILE
    threads = json.loads(threads_path.read_text()) if threads_path.exists() else {}
    runs: dict[str, dict[str, Any]] = {}
    for variant in identity["variants"]:
        for seed in identity["seeds"]:
            run_dir = out / "runs" / run_name(variant, seed)
            if (run_dir / "eval_after.json").exists():
                runs[run_name(variant, seed)] = {
                    "variant": variant,
                    "seed": seed,
                    "threads": threads.get(run_name(variant, seed)),
                    "before": json.loads((run_dir / "eval_before.json").read_text()),
                    "after": json.loads((run_dir / "eval_after.json").read_text()),
                }
    summary: dict[str, dict[str, Any]] = {}
    for variant in identity["variants"]:
        finished = [r for r in runs.values() if r["variant"] == variant]
        if not finished:
            continue
        groups = [*finished[0]["after"]["per_group"], "all"]
        summary[variant] = {"seeds": len(finished)}
        for group in groups:
            after = [r["after"]["overall" if group == "all" else "per_group"] for r in finished]
            after = [a if group == "all" else a[group] for a in after]
            summary[variant][group] = mean_std([a["accuracy"] for a in after])
        summary[variant]["before"] = mean_std([r["before"]["overall"]["accuracy"] for r in finished])
    results = {"runs": runs, "summary": summary, "group": next(iter(runs.values()))["after"]["group"] if runs else None}
    write_atomic(out / "results.json", json.dumps(results, indent=1))
    return results


def run_study(config: Path, overrides: dict[str, Any], study: CompareConfig, out: Path, argv: list[str]) -> str:
    """Run `lopti compare` (a comparison, or a grid of them with study.grid), write its reports; return its table."""
    import shlex

    from lopti.commands.compare_report import results_table, write_compare_report

    command = "lopti compare " + shlex.join(argv)
    if study.grid:
        from lopti.commands.grid import parse_grid, run_grid

        grid = parse_grid(study.grid, overrides)
        return run_grid(config, overrides, grid, study, out, argv)
    run_all(config, overrides, study.variants, study.seeds, out, study.jobs, study.threads)
    results = collect(out)
    write_compare_report(out, results, command, json.loads((out / "compare.json").read_text())["base"])
    return results_table(results)
