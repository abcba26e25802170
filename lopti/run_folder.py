"""A run folder as `lopti train` leaves it, read by the command that resumes it and by the studies that collect
it: the outputs of a finished run, its metrics log, and the newest checkpoint that was written completely.

A `checkpoint-N` folder counts only when every file a resume reads is present and loadable: the
trainer state, the model (or LoRA adapter) weights, the optimizer, the scheduler and the RNG states.
A folder missing any of them would resume silently with other results (a fresh optimizer, another
random stream), and a kill during the Trainer's save or its rotation of old checkpoints leaves such
folders. Loadable is checked cheaply: a safetensors header must parse and cover the file, and a
`torch.save` file (a zip archive, whose directory is written last) must open as a zip.

Layouts known: one process or DDP (`optimizer.pt`), DeepSpeed (`latest` naming a folder of
`*_optim_states.pt` and `*_model_states.pt`, with `scheduler.pt` only when DeepSpeed does not own it), and FSDP
(accelerate's `pytorch_model_fsdp.bin` and `optimizer.bin` for a full state dict, or the distributed-checkpoint
folders `pytorch_model_fsdp_0/` and `optimizer_0/` for a sharded one, each whole once its `.metadata` is written,
which torch.distributed.checkpoint does after every process's shard).
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "adapter_model.bin",
)


def run_outputs(evaluate: bool) -> list[str]:
    """Return the files a finished run holds besides its checkpoints, in the order they are written.

    run.json stands for final/: it is written once final/ is whole.
    """
    return ["run.json", *(["eval_before.json", "eval_after.json", "report.md"] if evaluate else [])]


def sampled_path(out: Path) -> Path:
    """Return where the sampled part of the evaluation saved at `out` goes."""
    return out.with_name(out.stem + "_sampled.json")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Return the lines of a metrics.jsonl file (empty if there is none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _unloadable(path: Path) -> str | None:
    """Return why the weights or state file `path` cannot be loaded, or None when it can."""
    if path.name == ".metadata":  # a distributed checkpoint's index, a pickle written after all its shards
        return None if path.stat().st_size > 0 else f"{path.parent.name}/.metadata is empty"
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), "pt"):
                return None
        except (SafetensorError, OSError) as error:
            return f"{path.name} is damaged ({error})"
    if path.suffix == ".json":  # a sharded model's index: every shard it names must load
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{path.name} is damaged"
        missing = [name for name in shards if not (path.parent / name).is_file()]
        if missing:
            return f"{missing[0]} is missing"
        return next(filter(None, (_unloadable(path.parent / name) for name in shards)), None)
    try:
        with zipfile.ZipFile(path):
            return None
    except (zipfile.BadZipFile, OSError):
        return f"{path.name} is damaged (not a whole torch.save file)"


def _deepspeed_problem(folder: Path) -> str | None:
    """Return what is wrong with the DeepSpeed states of `folder`, or None when they are whole."""
    tag = (folder / "latest").read_text().strip()
    states = sorted((folder / tag).glob("*_states.pt")) if tag and (folder / tag).is_dir() else []
    if not any(p.name.endswith("_optim_states.pt") for p in states):
        return f"DeepSpeed folder {tag or '?'} has no optimizer states"
    return next(filter(None, (_unloadable(p) for p in states)), None)


def _fsdp_states(folder: Path) -> list[str]:
    """Return the model and optimizer states FSDP saved in `folder` (both of the layout its model state shows),
    or [] when `folder` holds no FSDP model state."""
    if (folder / "pytorch_model_fsdp.bin").is_file():
        return ["pytorch_model_fsdp.bin", "optimizer.bin"]
    if (folder / "pytorch_model_fsdp_0").is_dir():
        return ["pytorch_model_fsdp_0/.metadata", "optimizer_0/.metadata"]
    return []


def checkpoint_problem(folder: Path) -> str | None:
    """Return why `folder` cannot be resumed from (the first missing or damaged file), or None."""
    try:
        state = json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return "trainer_state.json is missing or damaged"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return "trainer_state.json has no global_step"
    deepspeed = (folder / "latest").is_file()
    fsdp = _fsdp_states(folder)
    weights = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not weights and not deepspeed and not fsdp:  # DeepSpeed's and FSDP's states may hold the only weights
        return "no model weights (model.safetensors or an adapter) found"
    needed = weights if deepspeed else weights + (fsdp or ["optimizer.pt"]) + ["scheduler.pt"]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        return f"{missing[0]} is missing"
    random_states = sorted(folder.glob("rng_state*.pth"))
    if not random_states:
        return "rng_state.pth is missing"
    optional = [folder / name for name in ("scheduler.pt", "scaler.pt") if name not in needed]
    for path in [*(folder / name for name in needed), *random_states, *(p for p in optional if p.is_file())]:
        if problem := _unloadable(path):
            return problem
    return _deepspeed_problem(folder) if deepspeed else None


def checkpoint_step(folder: Path) -> int:
    """Return the optimizer step a checkpoint folder was saved at, from its name."""
    return int(CHECKPOINT_RE.match(folder.name).group(1))


def last_complete_checkpoint(run_dir: str | Path, skipped: Callable[[Path, str], None] | None = None) -> Path | None:
    """Return the complete checkpoint with the highest step in `run_dir`, or None.

    Each newer checkpoint passed over is reported to `skipped` with the reason, so that a resume can
    say which one it did not trust.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    folders = sorted((p for p in run_dir.iterdir() if p.is_dir() and CHECKPOINT_RE.match(p.name)), key=checkpoint_step)
    for folder in reversed(folders):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        if skipped is not None:
            skipped(folder, problem)
    return None
