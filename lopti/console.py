"""lopti's console: a progress bar per stage and one compact line per log, without third-party noise.

transformers' ProgressCallback writes the whole logs dict under its bar at every logging step (about 30
metrics for a lopti run), and the libraries under lopti print deprecation warnings a user cannot act on.
The full metrics still go to metrics.jsonl and TensorBoard; the console shows what a person watches:
reward, accuracy, the gradient share of the lowest-probability tokens (what AR and Lopti act on,
docs/paper.md §3 and §9), KL and the time per step.

Only `lopti`'s commands use this: a library user's `LoptiGRPOTrainer` keeps TRL's default console.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from dataclasses import dataclass

from tqdm.auto import tqdm
from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from lopti.core.buckets import bucket_labels

# Libraries whose FutureWarning / DeprecationWarning speak to their own callers (TRL, transformers, lopti),
# never to the person running `lopti`.
THIRD_PARTY_MODULES = r"(transformers|trl|accelerate|datasets|peft|torch|huggingface_hub|tokenizers|vllm)(\.|$)"


@dataclass(frozen=True)
class Column:
    """One value of the compact line: its label, its metrics key and its format; a share shows in %."""

    label: str
    key: str
    spec: str = ".4g"
    percent: bool = False

    def format(self, value: float) -> str:
        return f"{self.label} {100 * value:.1f}%" if self.percent else f"{self.label} {value:{self.spec}}"


SFT_COLUMNS = (Column("loss", "loss"), Column("token accuracy", "mean_token_accuracy", percent=True))


def rl_columns(accuracy_key: str, probability_buckets: list[float]) -> tuple[Column, ...]:
    """Return the RL line's columns: reward, the task's accuracy, the lowest bucket's gradient share, KL.

    The accuracy is the task's accuracy reward (its metrics key, `Task.accuracy_metric()`), which `lopti train`
    always logs (with weight 0 when it is not trained on); KL is only logged when beta > 0, and a column missing
    from a log is left out.
    """
    lowest = bucket_labels(probability_buckets)[0]
    return (
        Column("reward", "reward", ".3f"),
        Column("accuracy", accuracy_key, percent=True),
        Column(f"grad π<{probability_buckets[1]:g}", f"probs/grad_share_{lowest}", percent=True),
        Column("kl", "kl", ".3g"),
    )


def compact_line(logs: dict[str, float], step: int, max_steps: int, columns, seconds_per_step: float | None) -> str:
    """Return one log as "step 3/80 · reward 0.52 · accuracy 12.5% · … · 4.1 s/step".

    Evaluation logs (keys "eval_…") read the same columns and start with "eval".
    """
    prefix = "eval_" if any(key.startswith("eval_") for key in logs) else ""
    parts = [f"{'eval ' if prefix else ''}step {step:>{len(str(max_steps))}}/{max_steps}"]
    parts += [column.format(logs[prefix + column.key]) for column in columns if prefix + column.key in logs]
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.1f} s/step")
    return " · ".join(parts)


class ConsoleCallback(TrainerCallback):
    """A progress bar over the optimizer steps (on a terminal) and one compact line per log (always)."""

    def __init__(self, stage: str, columns: tuple[Column, ...]) -> None:
        self.stage = stage
        self.columns = columns
        self.bar: tqdm | None = None
        self.last_log = (0.0, 0)  # (time, step) of the previous log, for the seconds per step

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            # disable=None: tqdm draws no bar when stderr is not a terminal (a log file, a test)
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc=self.stage,
                unit="step",
                dynamic_ncols=True,
                disable=True if args.disable_tqdm else None,
            )
            if self.bar.disable:  # in a log file, say what starts, as the bar would on a terminal
                tqdm.write(f"{self.stage}: {state.max_steps} steps", file=sys.stdout)
        self.last_log = (time.monotonic(), state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the Trainer's closing summary: on a terminal, the finished bar says it
            if self.bar is None or self.bar.disable:
                summary = f"{self.stage}: finished at step {state.global_step} ({logs['train_runtime']:.0f} s)"
                tqdm.write(summary, file=sys.stdout)
            return
        now, (then, step_then) = time.monotonic(), self.last_log
        per_step = (now - then) / (state.global_step - step_then) if state.global_step > step_then else None
        tqdm.write(compact_line(logs, state.global_step, state.max_steps, self.columns, per_step), file=sys.stdout)
        self.last_log = (now, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def use_lopti_console(trainer, stage: str, columns: tuple[Column, ...]) -> None:
    """Replace the Trainer's dict printing (ProgressCallback, or PrinterCallback without tqdm) by lopti's console."""
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(ConsoleCallback(stage, columns))


class DeepSpeedCpuNotice(logging.Filter):
    """Drop DeepSpeed's "Setting accelerator to CPU" warning: on a CPU machine it is what the user asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Setting accelerator to CPU")


def hide_third_party_noise() -> None:
    """Hide what the libraries under `lopti` print that a person cannot act on.

    Their FutureWarnings and DeprecationWarnings (lopti's own warnings and every other category stay),
    transformers' bars for reading and writing weight files, datasets' bars for each preprocessing map, and
    DeepSpeed's warning, where it is installed, that it found no GPU and uses the CPU (logged as it is imported,
    on every CPU run); hub download bars stay.
    """
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=THIRD_PARTY_MODULES)
    # DeepSpeed creates its logger again at import, resetting its level but keeping the filters added here
    deepspeed_logger = logging.getLogger("DeepSpeed")
    if not any(isinstance(found, DeepSpeedCpuNotice) for found in deepspeed_logger.filters):
        deepspeed_logger.addFilter(DeepSpeedCpuNotice())
    import datasets
    from transformers.utils import logging as transformers_logging

    datasets.disable_progress_bars()
    # the hook sees only transformers' own bars; transformers.utils.logging.disable_progress_bar would
    # also silence huggingface_hub's download bars
    transformers_logging.set_tqdm_hook(lambda factory, args, kwargs: factory(*args, **{**kwargs, "disable": True}))
