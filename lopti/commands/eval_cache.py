"""The held-out evaluation of an embedded model before training, computed once per model, held-out set and settings.

Every default `lopti train`, and every run of a `lopti compare` study, starts from the same embedded model and
evaluates it on the same held-out set in the same way: greedy decoding, and sampling from a fixed seed, give the
same numbers each time. They are kept in the cache folder under a key made of the model folder's manifest (its
files' hashes), the held-out rows, the decoding settings, the torch version and the thread count, so only the
first run pays for them. A model without a manifest (any folder but an embedded one) is always evaluated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lopti.files import write_atomic
from lopti.models.embedded import MANIFEST, cache_root

Evaluation = tuple[dict[str, Any], dict[str, Any] | None]  # (greedy, sampled or None)


def evaluation_key(model_folder: str | Path, rows: list[dict], settings: dict[str, Any]) -> str | None:
    """Return the cache key of evaluating the model in `model_folder` on `rows`, or None if it has no manifest."""
    manifest = Path(model_folder) / MANIFEST
    if not manifest.is_file():
        return None
    payload = {
        "manifest": hashlib.sha256(manifest.read_bytes()).hexdigest(),
        "rows": rows,
        "settings": settings,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def remembered(key: str | None, compute: Callable[[], Evaluation]) -> tuple[Evaluation, bool]:
    """Return (the evaluation saved under `key`, True), or compute and save it: (it, False). Without a key,
    always compute."""
    if key is None:
        return compute(), False
    path = cache_root() / "evaluations" / f"{key}.json"
    try:
        greedy, sampled = json.loads(path.read_text())
        return (greedy, sampled), True
    except (OSError, ValueError, TypeError):
        pass  # missing, or cut short by a kill: compute it again
    greedy, sampled = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps([greedy, sampled]))
    return (greedy, sampled), False
