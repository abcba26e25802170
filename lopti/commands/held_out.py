"""`lopti train`'s held-out evaluations: greedy, and sampled with eval_samples, before and after training.

The evaluation before training is computed once per model, held-out set and settings. Every default `lopti train`,
and every run of a `lopti compare` study, starts from the same embedded model and evaluates it on the same held-out set
in the same way: greedy decoding, and sampling from a fixed seed, give the same numbers each time. They are kept in the
cache folder under a key made of the model folder's manifest (its files' hashes), the held-out rows, the decoding
settings, the torch version and the thread count, so only the first run pays for them. A model without a manifest
(any folder but an embedded one) is always evaluated.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset

from lopti.commands.settings import RunConfig
from lopti.cpu import evaluation_generation
from lopti.evaluation.scoring import evaluate_rows
from lopti.evaluation.token_probabilities import answer_token_counts
from lopti.files import write_atomic
from lopti.models.embedded import MANIFEST, cache_root
from lopti.run_folder import sampled_path
from lopti.tasks.task import Task
from lopti.train.trainer import LoptiGRPOTrainer

# Prompts per evaluation batch: the CPU fast path's loop drops rows as they end, so long batches cost little
# more than short ones, and each batch pays once for the few rows that run to the budget (docs/performance.md
# measures the held-out evaluation).
EVAL_BATCH_SIZE = 512

Evaluation = tuple[dict[str, Any], dict[str, Any] | None]  # (greedy, sampled or None)


@dataclass(frozen=True)
class Training:
    """A ready trainer with what `lopti train` evaluates it on: its task, the held-out rows, and the folder (or
    embedded model's name) the weights before training come from."""

    trainer: LoptiGRPOTrainer
    task: Task
    eval_rows: Dataset
    model_path: str


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


def held_out_eval(training: Training, run: RunConfig, out: Path, seconds: dict, before_training: bool = False) -> dict:
    """Evaluate the trainer's model on the run's held-out set; save and return the metrics.

    Greedy always (out); with eval_samples > 1 also sampled at eval_temperature (out with "_sampled"),
    under "sampled" in the returned dict. `out` is written last, so its presence means both are saved: a resumed run
    reads it back. Before training, the weights are the model folder's: an evaluation of them already made with the
    same rows and settings is reused (`start_eval_key`).
    """
    if run.resume and out.is_file():
        return saved_eval(out, run)
    started, label = time.time(), "eval before" if before_training else "eval after"
    trainer, task, rows = training.trainer, training.task, list(training.eval_rows)
    evaluate = functools.partial(
        evaluate_rows, trainer.model, trainer.processing_class, judge=task.judge, group=task.group,
        breakdown=task.breakdown, max_new_tokens=run.eval_max_new_tokens, batch_size=EVAL_BATCH_SIZE,
        reward_errors=trainer.args.reward_errors, reward_timeout=trainer.args.reward_timeout,
    )  # fmt: skip
    sampled_rows = rows[: run.eval_sampled_prompts] if run.eval_sampled_prompts else rows

    def compute() -> tuple[dict, dict | None]:
        weights, generation = evaluation_generation(trainer)  # on the CPU trainer, the rollout's generation
        count_tokens = None
        if run.eval_token_probabilities:  # on the weights the answers were sampled with
            count_tokens = functools.partial(
                answer_token_counts, weights, trainer.processing_class, temperature=run.eval_temperature,
                edges=trainer.args.probability_buckets,
            )  # fmt: skip
        with generation:
            greedy = evaluate(rows=rows, description=f"{label}, greedy")
            return greedy, evaluate(
                rows=sampled_rows, samples=run.eval_samples, temperature=run.eval_temperature,
                description=f"{label}, sampled", count_tokens=count_tokens,
            ) if run.eval_samples > 1 else None  # fmt: skip

    (result, sampled), reused = remembered(start_eval_key(training, run) if before_training else None, compute)
    message = f"{label}: held-out accuracy {100 * result['overall']['accuracy']:.1f}% greedy"
    saving = trainer.is_world_process_zero()
    if sampled is not None:
        if saving:
            write_atomic(sampled_path(out), json.dumps(sampled, indent=1))
        subset = f", first {len(sampled_rows)} prompts" if len(sampled_rows) < len(rows) else ""
        message += f", {100 * sampled['overall']['accuracy']:.1f}% sampled (T={run.eval_temperature}{subset})"
    if saving:
        write_atomic(out, json.dumps(result, indent=1))
    if sampled is not None:
        result = {**result, "sampled": sampled}
    seconds[label] = time.time() - started
    print(f"{message} on {len(rows)} prompts{' (saved by an earlier run of this model)' if reused else ''}")
    return result


def start_eval_key(training: Training, run: RunConfig) -> str | None:
    """Return the cache key of the evaluation before training, when the model is a folder with a manifest."""
    if run.lora_r > 0:
        return None
    trainer = training.trainer
    settings = {
        "task": run.task, "max_new_tokens": run.eval_max_new_tokens, "samples": run.eval_samples,
        "temperature": run.eval_temperature, "sampled_prompts": run.eval_sampled_prompts,
        "token_probabilities": list(trainer.args.probability_buckets) if run.eval_token_probabilities else None,
        "batch_size": EVAL_BATCH_SIZE, "cpu_fast_path": run.cpu_fast_path, "bf16": trainer.args.bf16,
        "sampling": "inverse-cdf",
        "reward_errors": trainer.args.reward_errors, "reward_timeout": trainer.args.reward_timeout,
    }  # fmt: skip
    return evaluation_key(training.model_path, list(training.eval_rows), settings)


def saved_eval(out: Path, run: RunConfig) -> dict:
    """Return an evaluation that `held_out_eval` saved in an earlier, interrupted invocation of the run."""
    result = json.loads(out.read_text())
    return {**result, "sampled": json.loads(sampled_path(out).read_text())} if run.eval_samples > 1 else result
