"""`lopti train`: build the task data and rewards, the model and the trainer, and fill the run folder.

A run folder holds config.yaml (the resolved settings), metrics.jsonl (one line per log), tensorboard/
(events), checkpoint-N/ (Trainer checkpoints), final/ (the trained model and tokenizer, HF format) and
README.md (lopti's model card); with evaluate, eval_*.json and report.md.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from lopti.train.checkpoints import last_complete_checkpoint
from lopti.train.config import LoptiGRPOConfig
from lopti.train.console import rl_columns, use_lopti_console
from lopti.train.evaluate import evaluate_rows
from lopti.train.model_card import method_line, use_lopti_model_card, write_model_card
from lopti.train.models import load_model, load_tokenizer, resolve_model
from lopti.train.report import write_report
from lopti.train.settings import RunConfig
from lopti.train.tasks import get_task
from lopti.train.trainer import LoptiGRPOTrainer


class MetricsLog(TrainerCallback):
    """Append every log of the trainer to metrics.jsonl, so a run can be plotted without tensorboard."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            with self.path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}) + "\n")


def drop_metrics_after(path: Path, step: int) -> None:
    """Keep only the metric lines up to `step`, so a resumed run does not log a step twice."""
    if path.exists():
        kept = [line for line in path.read_text().splitlines() if json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in kept))


def task_datasets(run: RunConfig):
    """Return (train, held-out) 🤗 datasets of the run's task, prompts in the trainer's format."""
    from datasets import Dataset

    train_rows, eval_rows = get_task(run.task).rows(run)
    return Dataset.from_list(train_rows), Dataset.from_list(eval_rows)


def task_rewards(run: RunConfig, weights: list[float] | None, tokenizer=None) -> tuple[list, list[float]]:
    """Return the reward functions and their weights; the task's accuracy is always logged, with weight 0.

    With a tokenizer, a completion that did not end on its end-of-sequence token earns no reward.
    """
    task = get_task(run.task)
    unknown = [name for name in run.rewards if name not in task.rewards]
    if unknown:
        raise ValueError(f"unknown {task.name} reward(s) {', '.join(unknown)}; choose from {', '.join(task.rewards)}")
    if weights is not None and len(weights) != len(run.rewards):
        raise ValueError(f"reward_weights has {len(weights)} entries but rewards has {len(run.rewards)}")
    ids = {} if tokenizer is None else dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    funcs = [task.make_reward(name, **ids) for name in run.rewards]
    weights = list(weights) if weights is not None else [1.0] * len(funcs)
    if task.accuracy_reward not in run.rewards:
        funcs.append(task.make_reward(task.accuracy_reward, **ids))
        weights.append(0.0)
    return funcs, weights


def peft_config(run: RunConfig):
    """Return a LoRA config for TRL when lora_r > 0, else None."""
    if run.lora_r <= 0:
        return None
    try:
        from peft import LoraConfig
    except ImportError:
        raise ValueError("lora_r > 0 needs peft: pip install 'lopti[peft]'") from None
    return LoraConfig(
        r=run.lora_r, lora_alpha=run.lora_alpha, target_modules=run.lora_target_modules, task_type="CAUSAL_LM"
    )


def build_trainer(run: RunConfig, trainer_kwargs: dict[str, Any]) -> LoptiGRPOTrainer:
    """Return a ready LoptiGRPOTrainer; every check that needs no compute happens first."""
    weights = trainer_kwargs.pop("reward_weights", None)
    task_rewards(run, weights)  # check names and weights before anything is loaded
    args = LoptiGRPOConfig(**trainer_kwargs, reward_weights=None)
    train, evaluation = task_datasets(run)
    model_path = resolve_model(run.model)  # may build an embedded model: only after every cheap check
    run_dir = Path(args.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(model_path)
    funcs, args.reward_weights = task_rewards(run, weights, tokenizer)
    trainer = LoptiGRPOTrainer(
        model=load_model(model_path),
        reward_funcs=funcs,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation if args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        peft_config=peft_config(run),
        callbacks=[MetricsLog(run_dir / "metrics.jsonl")],
    )
    trainer.lopti_eval_rows = evaluation  # the held-out set, for evaluation before and after training
    use_lopti_console(trainer, "RL", rl_columns(get_task(run.task), args.probability_buckets))
    use_lopti_model_card(trainer, run)
    return trainer


def held_out_eval(trainer: LoptiGRPOTrainer, run: RunConfig, out: Path, seconds: dict, label: str) -> dict:
    """Evaluate the trainer's model on the run's held-out set; save and return the metrics.

    Greedy always (out); with eval_samples > 1 also sampled at eval_temperature (out with "_sampled"),
    under "sampled" in the returned dict.
    """
    started = time.time()
    rows = list(trainer.lopti_eval_rows)
    task = get_task(run.task)
    evaluate = functools.partial(
        evaluate_rows, trainer.model, trainer.processing_class, rows, task.judge, task.group,
        max_new_tokens=run.eval_max_new_tokens,
    )  # fmt: skip
    result = evaluate()
    out.write_text(json.dumps(result, indent=1))
    message = f"{label}: held-out accuracy {100 * result['overall']['accuracy']:.1f}% greedy"
    if run.eval_samples > 1:
        sampled = evaluate(samples=run.eval_samples, temperature=run.eval_temperature)
        out.with_name(out.stem + "_sampled.json").write_text(json.dumps(sampled, indent=1))
        result = {**result, "sampled": sampled}
        message += f", {100 * sampled['overall']['accuracy']:.1f}% sampled (T={run.eval_temperature})"
    seconds[label] = time.time() - started
    print(f"{message} on {len(rows)} prompts")
    return result


def train(run: RunConfig, trainer_kwargs: dict[str, Any], settings: dict[str, Any]) -> Path:
    """Train, and return the run folder."""
    run_dir = Path(trainer_kwargs["output_dir"])
    checkpoint = last_complete_checkpoint(run_dir) if run.resume else None
    if run.resume and checkpoint is None:
        raise FileNotFoundError(f"--resume: no complete checkpoint in {run_dir}")
    if not run.resume and last_complete_checkpoint(run_dir) is not None:
        raise ValueError(
            f"{run_dir} already holds checkpoints; pass --resume to continue it or pick another output_dir"
        )
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir / "tensorboard")  # read by the Trainer's tensorboard hook
    if checkpoint is not None and int(os.environ.get("RANK", "0")) == 0:
        drop_metrics_after(run_dir / "metrics.jsonl", int(checkpoint.name.split("-")[1]))
    seconds = {}
    started = time.time()
    trainer = build_trainer(run, dict(trainer_kwargs))
    seconds["setup"] = time.time() - started
    main_process = trainer.is_world_process_zero()
    if main_process:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(settings, sort_keys=True))
    before = held_out_eval(trainer, run, run_dir / "eval_before.json", seconds, "eval before") if run.evaluate else None
    started = time.time()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    seconds["train"] = time.time() - started
    trainer.save_model(str(run_dir / "final"))
    if main_process:
        trainer.processing_class.save_pretrained(str(run_dir / "final"))
        summary = {
            "train_seconds": round(seconds["train"], 1),
            "global_step": trainer.state.global_step,
            "processes": trainer.accelerator.num_processes,
        }
        (run_dir / "run.json").write_text(json.dumps(summary))
        if before is not None:
            after = held_out_eval(trainer, run, run_dir / "eval_after.json", seconds, "eval after")
            write_report(run_dir, before, after, seconds, method_line(trainer.args))
        write_model_card(run_dir, run, trainer.args)
    return run_dir
