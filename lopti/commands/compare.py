"""`lopti compare`: the ablation study (docs/paper.md §8) — every variant × seed, evaluated on one held-out set.

Variants change only the method: `grpo` (ar_alpha 0, no Lopti), `ar`, `lopti`, `ar+lopti`. All see the
same number of generated batches (RL steps), as in the paper: Lopti makes two update passes per batch, so
its runs take twice the optimizer steps of the others. The base estimator is the recipe's (GRPO, or
REINFORCE++ with `advantage_estimator: reinforce_pp`). Seeds change the trainer seed (sampling); the
data and the held-out set stay fixed.

The results folder holds compare.json (what is compared; a folder of other settings is refused),
runs/<variant>-s<seed>/ (ordinary run folders: a finished run is skipped, an interrupted one resumed:
it trains only the steps it had left and writes only the outputs it lacks),
results.json (every run's numbers), results.md (mean ± std over seeds per group, gain over the base) and
curves.png (training curves with ± std bands).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopti.commands.checkpoints import last_complete_checkpoint
from lopti.commands.files import LOCK_NAME, folder_lock, write_atomic
from lopti.commands.settings import resolve, split
from lopti.core.constants import AR_ALPHA_KK  # AR's α when the base recipe has none

VARIANTS = ("grpo", "ar", "lopti", "ar+lopti")


@dataclass
class CompareConfig:
    """What `lopti compare` runs; its other settings are `lopti train`'s, applied to every run."""

    config: str | None = field(default=None, metadata={"help": "Base recipe (null: the embedded kk-tiny-cpu.yaml)."})
    variants: list[str] = field(
        default_factory=lambda: list(VARIANTS), metadata={"help": f"Methods to compare: any of {', '.join(VARIANTS)}."}
    )
    seeds: list[int] = field(
        default_factory=lambda: [0, 1, 2],
        metadata={"help": "Trainer seeds (sampling); the data and the held-out set stay the same."},
    )
    out: str | None = field(default=None, metadata={"help": "Results folder (null: results/RECIPE)."})


def variant_settings(base: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    """Return the settings of one run: the base recipe with the variant's method and the seed."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    passes = int(base.get("num_iterations", 1)) if base.get("lopti") else 1
    batches, rhythm = int(base["max_steps"]) // passes, int(base.get("save_steps", 0)) // passes
    uses_lopti = "lopti" in variant
    alpha = float(base.get("ar_alpha") or AR_ALPHA_KK) if variant.startswith("ar") else 0.0
    settings = {
        **base,
        "ar_alpha": alpha,
        "lopti": uses_lopti,
        "num_iterations": 2 if uses_lopti else 1,
        "max_steps": batches * (2 if uses_lopti else 1),
        "seed": seed,
        "evaluate": True,
    }
    if rhythm:
        settings["save_steps"] = rhythm * (2 if uses_lopti else 1)
    return settings


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def claim_folder(out: Path, identity: dict[str, Any]) -> None:
    """Write compare.json in `out`, or check that the one there describes the same study."""
    path = out / "compare.json"
    if path.exists():
        stored = json.loads(path.read_text())
        differing = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
        if differing:
            raise ValueError(
                f"{out} holds a comparison with other settings ({', '.join(differing)} differ); "
                "choose another --out or delete it"
            )
    elif out.exists() and any(p.name != LOCK_NAME for p in out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no lopti comparison; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(identity, indent=1, sort_keys=True))


def run_all(config: str | Path, overrides: dict[str, Any], variants: list[str], seeds: list[int], out: Path) -> None:
    """Train and evaluate every variant × seed in `out`, skipping finished runs and resuming others.

    `out` stays locked meanwhile, so a second comparison into it stops at once.
    """
    from lopti.commands.train_run import run_outputs, train

    base = resolve(config, overrides)
    identity = {"base": base, "variants": variants, "seeds": seeds}
    for variant in variants:
        variant_settings(base, variant, 0)  # unknown variants fail before anything is written
    with folder_lock(out):
        claim_folder(out, identity)
        for variant in variants:
            for seed in seeds:
                run_dir = out / "runs" / run_name(variant, seed)
                if all((run_dir / name).is_file() for name in run_outputs(evaluate=True)):
                    print(f"{run_dir.name}: finished, skipped")
                    continue
                settings = variant_settings(base, variant, seed) | {"output_dir": str(run_dir)}
                settings["resume"] = last_complete_checkpoint(run_dir) is not None
                print(f"{run_dir.name}: {'resuming' if settings['resume'] else 'training'}")
                run, trainer_kwargs = split(settings)
                train(run, trainer_kwargs, settings)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def collect(out: Path) -> dict[str, Any]:
    """Return every finished run's held-out results and the per-variant mean ± std; write results.json."""
    identity = json.loads((out / "compare.json").read_text())
    runs: dict[str, dict[str, Any]] = {}
    for variant in identity["variants"]:
        for seed in identity["seeds"]:
            run_dir = out / "runs" / run_name(variant, seed)
            if (run_dir / "eval_after.json").exists():
                runs[run_name(variant, seed)] = {
                    "variant": variant,
                    "seed": seed,
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
            summary[variant][group] = _mean_std([a["accuracy"] for a in after])
        summary[variant]["before"] = _mean_std([r["before"]["overall"]["accuracy"] for r in finished])
    results = {"runs": runs, "summary": summary, "group": next(iter(runs.values()))["after"]["group"] if runs else None}
    write_atomic(out / "results.json", json.dumps(results, indent=1))
    return results
