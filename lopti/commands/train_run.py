"""`lopti train`: build the task data and rewards, the model and the trainer, and fill the run folder.

A run folder holds config.yaml (the resolved settings), metrics.jsonl (one line per log), tensorboard/
(events), checkpoint-N/ (Trainer checkpoints), final/ (the trained model and tokenizer, HF format),
run.json (written once final/ is whole), README.md (lopti's model card) and, with evaluate,
eval_before.json, eval_after.json and report.md. One process at a time writes a folder (`folder_lock`).
`--resume` trains only the steps left after the newest complete checkpoint and then writes only the
outputs that are missing, so a run killed at any point, finished or not, resumed any number of times,
ends with the same files.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
import yaml
from datasets import Dataset

from lopti.commands.callbacks import MetricsLog, StopAtMaxSteps, TrainingEnded, drop_metrics_after
from lopti.commands.held_out import Training, held_out_eval, saved_eval
from lopti.commands.lengths import check_lengths, check_one_batch
from lopti.commands.model_card import LoptiModelCard, method_line, write_model_card
from lopti.commands.provenance import code_version
from lopti.commands.report import write_report
from lopti.commands.resume import resume_point
from lopti.commands.settings import RunConfig, split
from lopti.console import rl_columns, use_lopti_console
from lopti.cpu import hardware, precision_words, trainer_class
from lopti.files import folder_lock, write_atomic
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.run_folder import checkpoint_step, last_complete_checkpoint, run_outputs
from lopti.tasks.registry import get_task
from lopti.tasks.task import Task
from lopti.train.config import LoptiGRPOConfig
from lopti.train.engines import is_sharded
from lopti.train.trainer import LoptiGRPOTrainer

# How long the processes of a distributed launch wait for each other at its end. An unsharded run's first process
# evaluates the held-out set alone after training, for as long as that takes, so the wait has no practical bound:
# a process that dies closes its sockets, which ends the others' wait at once, and the launcher stops them.
END_WAIT = timedelta(days=7)


def sharding_of(trainer: LoptiGRPOTrainer) -> str | None:
    """Return how the launch sharded the model ("FSDP2", "DeepSpeed ZeRO-3", ...), None when every process held it
    whole: run.json records it, since a launch's config file, not lopti's settings, decides it."""
    accelerator = trainer.accelerator
    if getattr(accelerator, "is_fsdp2", False):
        return "FSDP2"
    if trainer.is_fsdp_enabled:
        return "FSDP"
    if trainer.is_deepspeed_enabled:
        return f"DeepSpeed ZeRO-{accelerator.state.deepspeed_plugin.zero_stage}"
    return None


def save_whole_model(trainer: LoptiGRPOTrainer, folder: Path) -> None:
    """Save the trained model to `folder` as one state dict. Under FSDP with a sharded state dict, transformers'
    `save_model` writes no weights at all (its checkpoints keep FSDP's sharded layout), so the shards are gathered
    here first; every process must call this, as the gather is a collective."""
    plugin = trainer.accelerator.state.fsdp_plugin if trainer.is_fsdp_enabled else None
    if plugin is None or "FULL_STATE_DICT" in str(plugin.state_dict_type):
        trainer.save_model(str(folder))
    else:
        trainer._save(str(folder), state_dict=trainer.accelerator.get_state_dict(trainer.model))


def end_wait_group(trainer: LoptiGRPOTrainer) -> dist.ProcessGroup | None:
    """Return the gloo group the processes of a distributed launch wait on at its end (`end_together`), None in
    one process. Every process must call this at the same point of the run, as forming a group is a collective."""
    if trainer.accelerator.num_processes == 1:
        return None
    return dist.new_group(backend="gloo", timeout=END_WAIT)


def end_together(trainer: LoptiGRPOTrainer, group: dist.ProcessGroup | None) -> None:
    """Wait until every process of the launch has written its outputs, then end the process group in each.

    Left to interpreter exit, a process's gloo threads can abort it ("terminate called without an active
    exception") and fail a launch that trained to the end; ending the group while another process still works
    aborts the same way, so the processes first wait for each other, on a group of their own (`END_WAIT`)."""
    if group is not None:
        dist.barrier(group=group)
    trainer.accelerator.end_training()


def task_datasets(task: Task, run: RunConfig):
    """Return (train, held-out) 🤗 datasets of the run's task, prompts in the trainer's format."""

    train_rows, eval_rows = task.rows(run.task_data())
    return Dataset.from_list(train_rows), Dataset.from_list(eval_rows)


def task_rewards(task: Task, run: RunConfig, weights: list[float] | None, tokenizer=None) -> tuple[list, list[float]]:
    """Return the reward functions and their weights; the task's accuracy is always logged, with weight 0.

    With a tokenizer, a completion that did not end on its end-of-sequence token earns no reward.
    """
    names = run.reward_names(task)  # known to the task, one weight each: `RunConfig`, `split`
    ids = {} if tokenizer is None else dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    funcs = [task.make_reward(name, **ids) for name in names]
    weights = list(weights) if weights is not None else [1.0] * len(funcs)
    if task.accuracy_reward not in names:
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


def build_trainer(task: Task, run: RunConfig, args: LoptiGRPOConfig) -> Training:
    """Return a ready trainer and its held-out rows; every check that needs no compute happens first. The trainer's
    reward weights are `args`'s with the task's accuracy reward added (weight 0)."""
    train, evaluation = task_datasets(task, run)
    check_one_batch(len(train), args)
    model_path = resolve_model(run.model)  # may build an embedded model: only after every cheap check
    run_dir = Path(args.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(model_path)
    budgets = {"max_completion_length": args.max_completion_length}
    if run.evaluate:
        budgets["eval_max_new_tokens"] = run.eval_max_new_tokens
    prompts = [*train["prompt"], *(evaluation["prompt"] if run.evaluate else [])]
    check_lengths(run.model, model_path, tokenizer, prompts, budgets)
    funcs, args.reward_weights = task_rewards(task, run, args.reward_weights, tokenizer)
    trainer = trainer_class(args.device, run.cpu_fast_path)(
        model=load_model(model_path),
        reward_funcs=funcs,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation if args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        peft_config=peft_config(run),
        callbacks=[MetricsLog(run_dir / "metrics.jsonl"), StopAtMaxSteps(), LoptiModelCard(run, task)],
    )
    use_lopti_console(trainer, "RL", rl_columns(task.accuracy_metric(), args.probability_buckets))
    return Training(trainer, task, evaluation, model_path)


def train(settings: dict[str, Any]) -> Path:
    """Train the run `settings` describe (a recipe's, then flags', with output_dir and bf16 decided), and return
    its folder; with resume, finish an interrupted or finished run (see above)."""
    run, trainer_kwargs = split(settings)  # every value checked before anything else
    args = LoptiGRPOConfig(**trainer_kwargs)
    main_process = int(os.environ.get("RANK", "0")) == 0
    with folder_lock(Path(args.output_dir)) if main_process else contextlib.nullcontext():
        return _train_locked(run, args, settings, main_process)


def _train_locked(run: RunConfig, args: LoptiGRPOConfig, settings: dict[str, Any], main_process: bool) -> Path:
    run_dir, task = Path(args.output_dir), get_task(run.task)
    checkpoint = resume_point(run_dir, settings, args.max_steps) if run.resume else None
    if not run.resume and (last_complete_checkpoint(run_dir) is not None or (run_dir / "run.json").exists()):
        raise ValueError(
            f"{run_dir} already holds checkpoints or a finished run; "
            "pass --resume to continue it or pick another output_dir"
        )
    todo = [name for name in run_outputs(run.evaluate) if not (run.resume and (run_dir / name).is_file())]
    seconds = {}
    if "run.json" not in todo:
        seconds["train"] = json.loads((run_dir / "run.json").read_text())["train_seconds"]
    if not {"run.json", "eval_before.json", "eval_after.json"} & set(todo):  # nothing needs the model
        if main_process:
            saved = ("eval_before.json", "eval_after.json") if todo else ()  # todo: report.md, from the two
            evaluations = [saved_eval(run_dir / name, run) for name in saved]
            write_outputs(run_dir, run, task, args, evaluations, seconds)
        print(f"{run_dir}: finished; {'wrote ' + ', '.join(todo) if todo else 'nothing left to do'}")
        return run_dir
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir / "tensorboard")  # read by the Trainer's tensorboard hook
    if main_process and checkpoint is not None:
        drop_metrics_after(run_dir / "metrics.jsonl", checkpoint_step(checkpoint))
    elif main_process:
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)  # left by a run killed before its first checkpoint
    started = time.time()
    training = build_trainer(task, run, args)
    trainer = training.trainer
    seconds["setup"] = time.time() - started
    end_group = end_wait_group(trainer)
    main_process = trainer.is_world_process_zero()
    if main_process and not run.resume:
        write_atomic(run_dir / "config.yaml", yaml.safe_dump(settings, sort_keys=True))
    evaluations = []
    if run.evaluate:
        evaluations.append(held_out_eval(training, run, run_dir / "eval_before.json", seconds, before_training=True))
    if "run.json" in todo or "eval_after.json" in todo:
        started = time.time()
        with contextlib.suppress(TrainingEnded):  # a finished run: the trainer holds its weights, untrained
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        seconds.setdefault("train", time.time() - started)
    if "run.json" in todo:
        save_whole_model(trainer, run_dir / "final")
        if main_process:
            trainer.processing_class.save_pretrained(str(run_dir / "final"))
            summary = {
                "train_seconds": round(seconds["train"], 1),
                "global_step": trainer.state.global_step,
                "processes": trainer.accelerator.num_processes,
                "sharding": sharding_of(trainer),
                "hardware": hardware(),
                "code": code_version(),
            }
            write_atomic(run_dir / "run.json", json.dumps(summary))
    # A sharded model's forwards gather its weights from every process: each one evaluates, the first one writes
    if run.evaluate and (main_process or is_sharded(trainer)):
        evaluations.append(held_out_eval(training, run, run_dir / "eval_after.json", seconds))
    if main_process:
        write_outputs(run_dir, run, task, args, evaluations, seconds)
    end_together(trainer, end_group)
    return run_dir


def write_outputs(
    run_dir: Path, run: RunConfig, task: Task, args: LoptiGRPOConfig, evaluations: list[dict], seconds: dict
) -> None:
    """Write report.md from the evaluations before and after training, when there are both, then the model card."""
    if len(evaluations) == 2:
        precision = precision_words(args.bf16, args.device.type == "cpu")
        write_report(run_dir, *evaluations, seconds, method_line(args), precision)
    write_model_card(run_dir, run, task, args)
