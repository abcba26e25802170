"""What `--resume` continues: the run's own settings (its config.yaml), never another recipe's.

A resumed run must end as the uninterrupted run would have, so it reads config.yaml from the run
folder and refuses any given setting that would change what is trained or measured. Only settings that
touch neither the weights nor the saved results may differ (`RESUME_MAY_CHANGE`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from lopti.commands.arguments import load_yaml
from lopti.commands.settings import RunConfig
from lopti.run_folder import checkpoint_step, last_complete_checkpoint
from lopti.train.config import LoptiGRPOConfig

RESUME_MAY_CHANGE = frozenset({"output_dir", "resume", "report_to", "logging_steps", "disable_tqdm", "log_level"})


@functools.cache
def _defaults() -> dict[str, Any]:
    """Return every settings key's default value, so that a key left out equals its default written out."""
    values = {}
    for item in (*dataclasses.fields(RunConfig), *dataclasses.fields(LoptiGRPOConfig)):
        if item.default is not dataclasses.MISSING:
            values[item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:
            values[item.name] = item.default_factory()
    return values


def check_resume_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    """Raise a ValueError naming each setting that differs from the run's config.yaml and may not change."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"--resume: {path} does not exist, so the run's settings are unknown")
    stored, given = _defaults() | load_yaml(path), _defaults() | settings
    changed = sorted(k for k in (set(stored) | set(given)) - RESUME_MAY_CHANGE if stored.get(k) != given.get(k))
    if changed:
        details = ", ".join(f"{key} ({stored.get(key)!r} there, {given.get(key)!r} now)" for key in changed)
        raise ValueError(
            f"--resume keeps the settings in {path}; these differ: {details}. "
            f"Only {', '.join(sorted(RESUME_MAY_CHANGE))} may change; start a new run for other settings"
        )


def resume_point(run_dir: Path, settings: dict[str, Any], max_steps: int) -> Path:
    """Return the checkpoint to resume from, after checking the settings; name each checkpoint passed over."""
    checkpoint = last_complete_checkpoint(run_dir, skipped=lambda folder, why: print(f"{folder.name} not used: {why}"))
    if checkpoint is None:
        raise FileNotFoundError(f"--resume: no complete checkpoint in {run_dir}")
    check_resume_settings(run_dir, settings)
    step = checkpoint_step(checkpoint)
    if 0 < max_steps < step:
        raise ValueError(
            f"--resume: {checkpoint} is at step {step}, past max_steps {max_steps}; a run cannot be shortened"
        )
    ended = " (training had ended: only missing outputs are redone)" if step == max_steps else ""
    print(f"resuming from {checkpoint.name}{ended}")
    return checkpoint
