"""Which code made a run: lopti's version and, for a run from a git clone, the commit and whether the working tree
had changes. run.json records it beside the hardware, so that a study trained over several sittings can show that
its runs share one code version (or say which differ)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import lopti

SOURCE = Path(lopti.__file__).resolve().parent.parent  # the clone's root when lopti is imported from a clone


def _git(*args: str) -> str | None:
    """Return git's output in the folder lopti was imported from, or None outside a clone (or without git)."""
    try:
        done = subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_code_version() -> dict[str, Any]:
    """Return lopti's version and, from a clone, its commit and whether tracked files under lopti/ differ from it
    (None for both when lopti is an installed wheel)."""
    top = _git("rev-parse", "--show-toplevel")
    in_clone = top is not None and Path(top.strip()).resolve() == SOURCE
    commit = _git("rev-parse", "HEAD") if in_clone else None
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", "lopti") if in_clone else None
    return {
        "lopti": lopti.__version__,
        "commit": commit.strip() if commit else None,
        "modified": bool(changes.strip()) if changes is not None else None,
    }


LOADED = read_code_version()  # read on import: a long process keeps the code it loaded while the clone moves on


def code_version() -> dict[str, Any]:
    """Return the code version of this process's lopti, as it was when lopti's commands were imported."""
    return dict(LOADED)
