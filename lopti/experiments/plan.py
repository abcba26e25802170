"""A registered study: `lopti compare --register` fixes what a study will test before any of its runs, and
writes it with its hash to plan.json in the study's folder.

The plan names the variants and seeds, the data split and the held-out set (the recipe's data settings; the
whole recipe is in it too), the primary comparisons and their metric, the test, α, the correction, and the
exclusion and collapse rules. A later `lopti compare` into the folder recomputes the plan from its own settings
and refuses to run when it differs from the registered one, so a study cannot gain seeds, change a setting or swap
its primary metric after its results are seen; results.md cites the hash. Plans are compared value by value, so a
plan that holds a float setting as 8.0 (TRL types save_steps a float) and one that holds it as 8, as its recipe wrote
it, are the same plan: the same values, hashed differently. Commit plan.json before the first run: the history then
shows it came first.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lopti.errors import UserError
from lopti.experiments.statistics import BOOTSTRAP_RESAMPLES, EXACT_SEEDS, LEVEL
from lopti.experiments.study import BASE, COLLAPSE_FORMAT_ERROR, PLAN_FILE
from lopti.files import write_atomic
from lopti.tasks.registry import data_keys

METRICS = ("greedy", "sampled", "pass@k")  # held-out accuracy greedy, sampled avg@k, or sampled pass@k
DATA_KEYS = frozenset(data_keys())  # the recipe keys that choose the prompts
TEST = (
    "exact two-sided sign-flip permutation test of the mean paired difference (variant − base, same seed), all 2^n "
    f"sign patterns up to {EXACT_SEEDS} seeds"
)
INTERVAL = f"{LEVEL:.0%} percentile bootstrap over seeds and held-out problems, {BOOTSTRAP_RESAMPLES} resamples"
EXCLUSION = "none: every registered run is analysed; a run that fails is resumed, never dropped or replaced"
COLLAPSE = (
    "greedy held-out accuracy after RL below the warm start's, or more than "
    f"{COLLAPSE_FORMAT_ERROR:.0%} of greedy held-out answers malformed; compared with Fisher's exact test"
)


def parse_comparisons(texts: list[str], variants: list[str]) -> list[tuple[str, str]]:
    """Return the primary comparisons as (variant, base) from "VARIANT:BASE" texts; none given: every variant
    against GRPO. Raise a UserError for a name that is not among `variants`."""
    if not texts:
        if BASE not in variants:
            raise UserError(f"--primary: no `{BASE}` variant to compare against; name the comparisons (lopti:grpo2)")
        return [(variant, BASE) for variant in variants if variant != BASE]
    pairs = []
    for text in texts:
        variant, colon, base = (part.strip() for part in text.partition(":"))
        if not colon or not variant or not base or variant == base:
            raise UserError(f"--primary {text!r}: expected VARIANT:BASE of two different variants (lopti:grpo)")
        missing = [name for name in (variant, base) if name not in variants]
        if missing:
            raise UserError(f"--primary {text!r}: {missing[0]} is not among --variants ({', '.join(variants)})")
        pairs.append((variant, base))
    return pairs


def study_plan(
    base: dict[str, Any], variants: list[str], seeds: list[int], primary: list[str], metric: str, alpha: float
) -> dict[str, Any]:
    """Return the plan of a study: everything its analysis is fixed to, as JSON-ready values."""
    if metric not in METRICS:
        raise UserError(f"--primary_metric {metric}: expected one of {', '.join(METRICS)}")
    if not 0 < alpha < 1:
        raise UserError(f"--alpha {alpha}: expected a level between 0 and 1")
    return {
        "variants": list(variants),
        "seeds": list(seeds),
        "data": {key: value for key, value in sorted(base.items()) if key in DATA_KEYS or key.startswith("eval_")},
        "recipe": base,
        "primary_comparisons": [f"{variant}:{against}" for variant, against in parse_comparisons(primary, variants)],
        "primary_metric": metric,
        "test": TEST,
        "interval": INTERVAL,
        "alpha": alpha,
        "correction": "Holm over the primary comparisons",
        "exclusion": EXCLUSION,
        "collapse": COLLAPSE,
    }


def plan_hash(plan: dict[str, Any]) -> str:
    """Return the SHA-256 of the plan's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(plan, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_plan(out: Path) -> dict[str, Any] | None:
    """Return the registered plan.json of `out` ({"plan", "hash"}), or None when the study is not registered."""
    path = out / PLAN_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if plan_hash(record["plan"]) != record["hash"]:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path} is damaged or was edited by hand (its hash does not match its plan)") from None
    return record


def _changed(registered: dict[str, Any], now: dict[str, Any]) -> list[str]:
    keys = sorted(key for key in registered.keys() | now.keys() if registered.get(key) != now.get(key))
    if "recipe" in keys:
        recipe = registered.get("recipe", {}), now.get("recipe", {})
        keys[keys.index("recipe")] = (
            "recipe ("
            + ", ".join(sorted(k for k in recipe[0].keys() | recipe[1].keys() if recipe[0].get(k) != recipe[1].get(k)))
            + ")"
        )
    return keys


def check_registered(out: Path, plan: dict[str, Any]) -> str | None:
    """Return the hash of `out`'s registered plan when `plan` has its values (None for an unregistered study);
    raise a UserError naming what changed when it has not."""
    record = read_plan(out)
    if record is None:
        return None
    if record["plan"] != plan:
        raise UserError(
            f"{out} holds a study registered with plan {record['hash'][:12]}; these settings change its "
            f"{', '.join(_changed(record['plan'], plan))}; a registered plan cannot change: register a new study "
            "in another folder"
        )
    return record["hash"]


def register(out: Path, plan: dict[str, Any]) -> str:
    """Write plan.json with the plan and its hash in `out`, before any run; return the hash. Registering the
    same plan again changes nothing; a folder that already holds runs is refused."""
    if check_registered(out, plan) is not None:
        return plan_hash(plan)
    runs = out / "runs"
    if runs.is_dir() and any(runs.iterdir()):
        raise UserError(f"{out} already holds runs; a plan is registered before any run, in a new folder")
    out.mkdir(parents=True, exist_ok=True)
    digest = plan_hash(plan)
    write_atomic(out / PLAN_FILE, json.dumps({"plan": plan, "hash": digest}, indent=1, sort_keys=True) + "\n")
    return digest
