"""`lopti train`'s settings: `RunConfig` (what to train on) and `LoptiGRPOConfig` (how to train).

They come from the field defaults, then a YAML recipe, then `--key value` on the command line
(`lopti.commands.command_line` makes the flags). Unknown keys are rejected with the closest valid names,
bad values with the key and the value, before any compute is spent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lopti.commands.command_line import load_yaml
from lopti.commands.fields import check_keys, check_values, field_names
from lopti.errors import UserError, check_output_folder
from lopti.models.loading import MODEL_HELP
from lopti.tasks.registry import TaskData, get_task
from lopti.tasks.task import Task
from lopti.train.config import LoptiGRPOConfig


@dataclass
class RunConfig(TaskData):
    """What to train: model, task data (`TaskData`), rewards, LoRA, resume and the held-out evaluation."""

    model: str = field(default="tiny", metadata={"help": MODEL_HELP})
    cpu_fast_path: bool = field(
        default=True,
        metadata={
            "help": "On the CPU, train with lopti's CPU trainer (lopti.cpu): each prompt once per group of "
            "completions in the rollout's prefill and in the log-prob forwards, and with num_iterations > 1 the old "
            "log-probs from the first pass's forward instead of a forward of their own. The same numbers up to "
            "float rounding, in about half the time (docs/performance.md). No effect on other devices, or for PEFT, "
            "vision and non-sdpa models. False trains with LoptiGRPOTrainer on TRL's own code paths."
        },
    )
    rewards: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions, from the task's own (lopti.tasks); null: the task's default ones.",
        },
    )
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 trains all weights (LoRA needs peft)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling α."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "LoRA target modules."})
    resume: bool = field(default=False, metadata={"help": "Continue from the last complete checkpoint."})
    evaluate: bool = field(
        default=False,
        metadata={"help": "Greedy held-out evaluation before and after training, written to report.md."},
    )
    eval_max_new_tokens: int = field(
        default=64,
        metadata={
            "help": "Token budget of each held-out evaluation answer (lopti eval's key too); the rollouts' budget "
            "is max_completion_length.",
        },
    )
    eval_samples: int = field(
        default=0,
        metadata={
            "help": "With evaluate: also this many samples per prompt (avg@k, pass@k); 0 = greedy only.",
        },
    )
    eval_temperature: float = field(default=1.0, metadata={"help": "Temperature of the sampled evaluation."})
    eval_sampled_prompts: int = field(
        default=0,
        metadata={
            "help": "With eval_samples: sample on the first this many held-out prompts only (the sampled "
            "evaluation costs eval_samples greedy ones per prompt); 0 = all of them.",
        },
    )
    eval_token_probabilities: bool = field(
        default=False,
        metadata={
            "help": "With eval_samples: also count the sampled answers' tokens per probability bucket "
            "(probability_buckets; π at eval_temperature), by one more forward pass over them: "
            "token_probability_shares in eval_*_sampled.json.",
        },
    )
    BOUNDS: ClassVar[dict[str, dict[str, Any]]] = {
        "rewards": {"min_items": 1}, "lora_r": {"min": 0}, "lora_alpha": {"min": 1}, "eval_max_new_tokens": {"min": 1},
        "eval_samples": {"min": 0}, "eval_temperature": {"above": 0}, "eval_sampled_prompts": {"min": 0},
    }  # fmt: skip
    _argument_group_name = "RunConfig (lopti): what to train, with the task data (TaskData)"

    def reward_names(self, task: Task) -> list[str]:
        """Return the reward functions the run trains on: `rewards`, or the task's default ones."""
        return list(self.rewards or task.default_rewards)


def train_keys() -> set[str]:
    """Return every key of `lopti train`: RunConfig's and LoptiGRPOConfig's."""
    return field_names(RunConfig) | field_names(LoptiGRPOConfig)


def resolve(config_file: str | Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """Return the settings of a run: the YAML file's, then the command-line overrides, every value checked."""
    settings, sources = {}, {}
    if config_file is not None:
        from_file = load_yaml(config_file)
        check_keys(from_file, train_keys(), str(config_file))
        settings.update(from_file | check_run_values(from_file, str(config_file)))
        sources |= dict.fromkeys(from_file, str(config_file))
    check_keys(overrides, train_keys(), "command line")
    settings.update(overrides | check_run_values(overrides, "command line"))
    sources |= dict.fromkeys(overrides, "command line")
    get_task(settings.get("task", RunConfig.task)).check_keys(sources)
    return settings


def from_run_config(path: str | Path, schema: type) -> dict[str, Any]:
    """Return what a recipe or a run's config.yaml says about the fields of the dataclass `schema`.

    That is each field that RunConfig has too (the task data, the model), or that the class's `RUN_KEYS` table maps
    to its RunConfig or LoptiGRPOConfig counterpart (analyze's AdamW settings: the recipe's learning rate, betas,
    ...); the file's other keys are `lopti train`'s business and are ignored, but a key no command knows is
    refused with the closest names.
    """
    recipe = load_yaml(path)
    check_keys(recipe, train_keys(), str(path))
    run_keys = getattr(schema, "RUN_KEYS", {})
    taken = {}
    for name in field_names(schema):
        key = run_keys.get(name, name)
        mirrored = train_keys() if name in run_keys else field_names(RunConfig)
        if key in mirrored and key in recipe:
            taken[name] = recipe[key]
    return check_values(taken, schema, str(path))


def check_run_values(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Return `values` converted to the types of their RunConfig / LoptiGRPOConfig fields (see check_values)."""
    return check_values(values, LoptiGRPOConfig, source) | check_values(values, RunConfig, source)


def check_settings(run: RunConfig, trainer_kwargs: dict[str, Any]) -> None:
    """Raise a ValueError for settings that are each valid but cannot work together or here, before any compute."""
    if run.evaluate and run.eval_puzzles < 1 and not run.eval_file:
        raise UserError(f"evaluate: true needs held-out prompts, but eval_puzzles is {run.eval_puzzles}")
    if "output_dir" in trainer_kwargs:
        check_output_folder(trainer_kwargs["output_dir"], "output_dir")
    report_to = trainer_kwargs.get("report_to")
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    wanted = [name for name in wanted if name not in ("none", "all")]
    if wanted:
        from transformers.integrations import get_available_reporting_integrations
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        for name in wanted:
            if name not in INTEGRATION_TO_CALLBACK:
                raise UserError(f"report_to {name!r} is unknown; choose from {', '.join(INTEGRATION_TO_CALLBACK)}")
            if name not in get_available_reporting_integrations():
                raise UserError(f"report_to {name!r}: {name} is not installed (pip install {name}), or drop it")


def split(settings: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """Return the RunConfig and the keyword arguments for LoptiGRPOConfig, every value checked."""
    checked = {**settings, **check_run_values(settings, "settings")}
    run = RunConfig(**{k: v for k, v in checked.items() if k in field_names(RunConfig)})
    trainer_kwargs = {k: v for k, v in checked.items() if k in field_names(LoptiGRPOConfig)}
    check_settings(run, trainer_kwargs)
    return run, trainer_kwargs
