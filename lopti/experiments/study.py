"""A study of `lopti compare`: its runs (every variant × seed of one base recipe), the folder that holds them,
and its results. `lopti compare` (`lopti.experiments.compare`) runs one study; `--grid` (`lopti.experiments.grid`)
runs one per grid point.

Variants change only the method; a variant is any method name of `lopti.core.methods`, or one of Lopti's
controls (`grpo2`, `lopti_random`). All see the same number of generated batches (RL steps), as in the
paper: Lopti and its controls make two update passes per batch, so their runs take twice the optimizer
steps of the others. Seeds change the trainer seed (sampling); the data and the held-out set stay fixed.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from lopti.commands.settings import resolve, split
from lopti.core.credit_presets import credit_problems
from lopti.core.methods import MethodSpec, parse_method
from lopti.experiments.jobs import Job
from lopti.files import claim_folder, write_atomic
from lopti.run_folder import last_complete_checkpoint, run_outputs
from lopti.tasks.registry import task_of

STUDY_FILE, THREADS_FILE, PLAN_FILE = "compare.json", "threads.json", "plan.json"
BASE = "grpo"  # the variant every other is compared with, unless a registered plan names other comparisons
# a run has collapsed when RL left it below its warm start, or when it stopped answering in the format
COLLAPSE_FORMAT_ERROR = 0.05


def _credit_constants(base: dict[str, Any], spec: MethodSpec) -> dict[str, dict[str, float]]:
    """Return the recipe's constants of the variant's presets, overridden by the ones the variant's name sets."""
    given = base.get("token_credit_kwargs") or {}
    if isinstance(given, str):  # the JSON string form that LoptiGRPOConfig also takes
        given = json.loads(given)
    return {name: dict(given[name]) for name in spec.token_credit if name in given} | spec.token_credit_kwargs


def variant_settings(base: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    """Return the settings of one run: the base recipe with the variant's method and the seed. A variant with AR
    takes the recipe's α, or its task's own where the recipe has none (a GRPO recipe's 0)."""
    try:
        spec = parse_method(variant)
    except ValueError as error:
        raise ValueError(f"--variants: {error}") from None
    passes = int(base.get("num_iterations", 1)) if base.get("lopti") else 1
    batches, rhythm = int(base["max_steps"]) // passes, int(base.get("save_steps", 0)) // passes
    alpha = float(base.get("ar_alpha") or task_of(base).ar_alpha) if spec.ar else 0.0
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


def study_base(config: str | Path, overrides: dict[str, Any], variants: list[str]) -> dict[str, Any]:
    """Return the base settings of a study (the recipe's, then `overrides`, as `lopti train` resolves them), with
    every variant's settings checked too, so that a bad recipe or variant fails before anything is written."""
    base = resolve(config, overrides)
    check_variants(base, variants)
    return base


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


# A study may gain variants and seeds later: each run depends only on the base settings, its variant and
# its seed, so the runs already there stay valid and the reports cover the union.
GROWABLE = ("variants", "seeds")


def study_identity(base: dict[str, Any], variants: list[str], seeds: list[int]) -> dict[str, Any]:
    """Return what compare.json records: what a folder's runs are, so that another study is refused."""
    return {"base": base, "variants": variants, "seeds": seeds}


def claim_study(out: Path, base: dict[str, Any], variants: list[str], seeds: list[int]) -> None:
    """Write compare.json in `out`, or check that the one there is of the same base settings (its variants and
    seeds grow to include these)."""
    identity = study_identity(base, variants, seeds)
    claim_folder(out, STUDY_FILE, identity, "a comparison", allowed={PLAN_FILE}, growable=GROWABLE)


def train_settings(settings: dict[str, Any]) -> None:
    """Train one run of a study from its settings (the runner of `run_jobs`; `plan_runs` has set its precision)."""
    from lopti.commands.train_run import train

    train(settings)


def train_keeping_records(settings: dict[str, Any]) -> None:
    """Train one run as `train_settings` does, then delete its weights (final/ and its checkpoints), keeping its
    records (settings, metrics, evaluations, report, run.json): a study is read from its records, and 60 runs of a
    135M-parameter model would otherwise keep about 2 GB each. A run that fails keeps its checkpoints to resume."""
    import shutil

    train_settings(settings)
    run_dir = Path(settings["output_dir"])
    for weights in [run_dir / "final", *run_dir.glob("checkpoint-*")]:
        shutil.rmtree(weights, ignore_errors=True)


def study_precision(out: Path, base: dict[str, Any]) -> dict[str, Any]:
    """Return the precision every run of the study in `out` trains with, as settings to add to each run's.

    A CPU run that leaves `bf16` unset gets it from the CPU (`with_cpu_precision`: on where bf16 is native). A study
    runs over several sittings, possibly on other CPUs, so that choice is made once: runs already started keep the
    `bf16` their config.yaml records, and the runs still to train take the same (emulated, and much slower, on a
    CPU without native bf16), rather than each machine's own choice mixing two recipes in one comparison.
    """
    import yaml

    from lopti.cpu import native_bf16, with_cpu_precision

    chosen = {key: base[key] for key in ("bf16", "fp16") if key in base}
    if chosen:
        return chosen
    started = {
        config.parent.name: bool(yaml.safe_load(config.read_text()).get("bf16"))
        for config in sorted(out.glob("runs/*/config.yaml"))
    }
    if len(set(started.values())) > 1:
        fewer = min((True, False), key=lambda bf16: list(started.values()).count(bf16))
        odd = [name for name, bf16 in started.items() if bf16 == fewer]
        raise ValueError(
            f"{out}: {', '.join(odd)} trained in {'bf16' if fewer else 'fp32'}, the study's other "
            f"{len(started) - len(odd)} runs in {'fp32' if fewer else 'bf16'}; one study's runs share one precision: "
            "delete the odd runs' folders to train them again"
        )
    if not started:
        return {key: value for key, value in with_cpu_precision(base).items() if key == "bf16"}
    bf16 = next(iter(started.values()))
    if bf16 and not native_bf16():
        print(
            f"{out}: its runs train in bf16 as its first ones did; this CPU has no native bf16 and emulates it, many "
            "times slower than fp32 (25x for SmolLM2-135M on an AVX2-only EPYC): continue on a CPU with AVX-512 BF16 "
            "or AMX"
        )
    return {"bf16": bf16}


def plan_runs(
    out: Path, base: dict[str, Any], variants: list[str], seeds: list[int], threads: int, prefix: str = ""
) -> list[Job]:
    """Return the runs of a claimed folder left to train (finished ones are skipped), each with its thread count.

    A run keeps the thread count recorded in threads.json when it was first started, so a resumed run stays
    on its floating-point path; the others get `threads`, recorded before they start. All take the study's
    precision (`study_precision`).
    """
    threads_path = out / THREADS_FILE
    recorded = json.loads(threads_path.read_text()) if threads_path.exists() else {}
    precision = study_precision(out, base)
    jobs = []
    # seed by seed: a study stopped partway (a long one runs over several sittings) holds every variant of the
    # seeds it finished, which pair with each other
    for seed in seeds:
        for variant in variants:
            name = run_name(variant, seed)
            run_dir = out / "runs" / name
            if all((run_dir / output).is_file() for output in run_outputs(evaluate=True)):
                print(f"{prefix}{name}: finished, skipped")
                continue
            settings = variant_settings(base, variant, seed) | precision | {"output_dir": str(run_dir)}
            settings["resume"] = last_complete_checkpoint(run_dir) is not None
            recorded.setdefault(name, threads)
            jobs.append(Job(f"{prefix}{name}", settings, recorded[name], run_dir / "train.log"))
    if jobs:
        write_atomic(threads_path, json.dumps(recorded, indent=1, sort_keys=True))
    return jobs


def mean_std(values: list[float]) -> tuple[float, float]:
    """Return the mean and the sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def collect(out: Path) -> dict[str, Any]:
    """Return every finished run's held-out results and the per-variant mean ± std; write results.json."""
    identity = json.loads((out / STUDY_FILE).read_text())
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


def below_warm_start(run: dict[str, Any]) -> bool:
    """Return whether a run of results.json ended with held-out accuracy below its warm start's."""
    return run["after"]["overall"]["accuracy"] < run["before"]["overall"]["accuracy"]


def malformed(run: dict[str, Any]) -> bool:
    """Return whether more than COLLAPSE_FORMAT_ERROR of a run's greedy held-out answers after RL are malformed."""
    return run["after"]["overall"].get("format_error", 0.0) > COLLAPSE_FORMAT_ERROR


def collapsed(run: dict[str, Any]) -> bool:
    """Return whether a run of results.json collapsed: below its warm start, or malformed."""
    return below_warm_start(run) or malformed(run)
