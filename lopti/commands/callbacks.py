"""What `lopti train` adds to TRL's trainer through transformers' callbacks, and keeps of its logs.

metrics.jsonl takes every log (`MetricsLog`), trimmed back to the checkpoint a run resumes from
(`drop_metrics_after`); `StopAtMaxSteps` ends a resumed run that has no step left before it trains one.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

from lopti.files import write_atomic


class MetricsLog(TrainerCallback):
    """Append every log of the trainer to metrics.jsonl, so a run can be plotted without tensorboard."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            with self.path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}) + "\n")


class TrainingEnded(Exception):
    """Raised by `StopAtMaxSteps` when a resumed run has no step left to train."""


class StopAtMaxSteps(TrainerCallback):
    """Stop a run resumed at max_steps before the Trainer takes a step.

    transformers checks max_steps only after each optimizer step, so resuming from the last checkpoint
    would train one step more (and overwrite final/). By the first step's start the checkpoint's
    weights are loaded, so stopping there leaves the trainer holding the finished model.
    """

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps:
            raise TrainingEnded


def drop_metrics_after(path: Path, step: int) -> None:
    """Keep only the metric lines up to `step`, so a resumed run does not log a step twice.

    A kill or a full disk can leave the last line cut short or blank: it is dropped. A damaged line
    before the last cannot come from an interruption, so it is an error naming the file and line.
    """
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                print(f"{path}: dropped its last line, cut short by an interruption")
                break
            raise ValueError(f"{path} line {number} is not valid JSON; repair or delete that line to resume") from None
        if record.get("step", 0) <= step:
            kept.append(line)
    write_atomic(path, "".join(line + "\n" for line in kept))
