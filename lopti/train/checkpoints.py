"""Checkpoints that survive a kill: find the newest one that was written completely.

The 🤗 Trainer writes `trainer_state.json` last in each `checkpoint-N` folder, after the model,
optimizer, scheduler and RNG states, and only deletes older checkpoints after that. So a folder whose
`trainer_state.json` parses is complete; a kill mid-save leaves the previous one usable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def is_complete_checkpoint(folder: Path) -> bool:
    """Return True iff `folder` holds a fully written Trainer checkpoint."""
    try:
        state = json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and "global_step" in state


def last_complete_checkpoint(run_dir: str | Path) -> Path | None:
    """Return the complete checkpoint with the highest step in `run_dir`, or None."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    steps = sorted((int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := CHECKPOINT_RE.match(p.name)))
    for _, folder in reversed(steps):
        if is_complete_checkpoint(folder):
            return folder
    return None
