"""`lopti train`'s settings: `RunConfig` (what to train on) and `LoptiGRPOConfig` (how to train).

They come from the field defaults, then a YAML recipe, then `--key value` on the command line
(`lopti.commands.arguments` makes the flags). Unknown keys are refused with the closest valid names, bad values
with the key, the value and its source, by the dataclasses themselves, before any model is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import TrlParser

from lopti.commands.arguments import SettingsLayer, load_yaml
from lopti.errors import SettingError, UserError, check_keys, check_number
from lopti.models.loading import MODEL_HELP
from lopti.tasks.registry import DEFAULT_TASK, TaskSettings, check_data_keys, get_task
from lopti.tasks.task import Task, check_puzzle_counts
from lopti.train.config import LoptiGRPOConfig

RECIPES = Path(__file__).parents[1] / "configs"


@dataclass
class RunConfig(TaskSettings):
    """What to train: model, task data (`TaskSettings`), rewards, LoRA, resume and the held-out evaluation."""

    model: str = field(default="tiny", metadata={"help": MODEL_HELP})
    cpu_fast_path: bool = field(
        default=True,
        metadata={
            "help": "On the CPU, train with lopti's CPU trainer (lopti.cpu): each prompt once per group of "
            "completions in the rollout's prefill and in the log-prob forwards, and with num_iterations > 1 the old "
            "log-probs from the first pass's forward instead of a forward of their own. The same numbers up to "
            "float rounding, in fewer forward tokens (bench/step_time.py times it). No effect on other devices, or "
            "for PEFT, vision and non-sdpa models. False trains with LoptiGRPOTrainer on TRL's own code paths."
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
    _argument_group_name = "RunConfig (lopti): what to train, with the task data (TaskData)"

    def __post_init__(self) -> None:
        check_puzzle_counts(self)  # a training set of at least one prompt per size or level
        if self.rewards is not None and not self.rewards:
            raise SettingError("rewards", "rewards must name at least one reward function (null: the task's own)")
        check_number("lora_r", self.lora_r, low=0)
        check_number("lora_alpha", self.lora_alpha, low=1)
        check_number("eval_max_new_tokens", self.eval_max_new_tokens, low=1)
        check_number("eval_samples", self.eval_samples, low=0)
        check_number("eval_temperature", self.eval_temperature, above=0)
        check_number("eval_sampled_prompts", self.eval_sampled_prompts, low=0)
        if self.evaluate and not self.task_data().has_held_out():
            needs = f"evaluate: true needs held-out prompts, but eval_puzzles is {self.eval_puzzles}"
            raise SettingError("evaluate", needs)
        task = get_task(self.task)
        unknown = [name for name in self.rewards or [] if name not in task.rewards]
        if unknown:
            raise SettingError(
                "rewards", f"unknown {task.name} reward(s) {', '.join(unknown)}; choose from {', '.join(task.rewards)}"
            )

    def reward_names(self, task: Task) -> list[str]:
        """Return the reward functions the run trains on: `rewards`, or the task's default ones."""
        return list(self.rewards or task.default_rewards)


class LoptiParser(SettingsLayer, TrlParser):
    """TRL's TrlParser with lopti's settings layer: the parser of `lopti train`, `eval`, `analyze` and `compare`."""


def train_parser() -> LoptiParser:
    """Return the parser of `lopti train`'s settings: RunConfig's and LoptiGRPOConfig's."""
    return _parser_of(RunConfig, LoptiGRPOConfig)


@functools.cache
def _parser_of(*kinds: type) -> LoptiParser:
    return LoptiParser(kinds, prog="lopti train")


def train_keys() -> set[str]:
    """Return every key of `lopti train`: RunConfig's and LoptiGRPOConfig's."""
    return set(train_parser().flags)


def resolve(config_file: str | Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """Return the settings of a run: the YAML file's, converted as their flags convert text, then `overrides` (the
    command line's, already converted, or a study's), every key and value checked (`split`), a refused one named
    with its source."""
    settings = train_parser().read(config_file) if config_file is not None else {}
    sources = dict.fromkeys(settings, str(config_file))
    check_keys(overrides, train_keys(), "command line")
    settings |= overrides
    sources |= dict.fromkeys(overrides, "command line")
    check_data_keys(get_task(settings.get("task", RunConfig.task)), sources)
    try:
        split(settings)
    except SettingError as error:
        raise UserError(f"{sources.get(error.key, 'settings')}: {error}") from None
    return settings


def default_recipe(task_name: str | None = None) -> Path | None:
    """Return the embedded recipe `lopti train` uses for a task (with no --task: `DEFAULT_TASK`'s) without --config;
    None where the task has none (its field defaults are the settings)."""
    recipe = get_task(task_name or DEFAULT_TASK).recipe
    return None if recipe is None else RECIPES / recipe


def train_settings(config_file: str | Path | None, given: dict[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """Return `lopti train`'s settings and the recipe they start from (--config, else the task's embedded one).

    With --resume they are the run's config.yaml under the values given, never the default recipe's (`train` refuses
    changed settings). Without output_dir, the run's folder is runs/RECIPE-TIME.
    """
    recipe = Path(config_file) if config_file else default_recipe(given.get("task"))
    settings = resumed_settings(config_file, given) if given.get("resume") else resolve(recipe, given)
    if "output_dir" not in settings:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UserError(
                "set --output_dir in a distributed launch: each process would name its own timestamped folder"
            )
        name = recipe.stem if recipe else settings.get("task", "run")
        settings["output_dir"] = str(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return settings, recipe


def resumed_settings(config_file: str | Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """Return the settings of a run to resume: its config.yaml, then the recipe and overrides given.

    The given ones are checked against config.yaml when training starts (`resume.check_resume_settings`).
    """
    given = resolve(config_file, overrides)
    if not given.get("output_dir"):
        raise ValueError("--resume needs --output_dir, the run folder to continue")
    path = Path(given["output_dir"]) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"--resume: {path} does not exist; is {given['output_dir']} a lopti run folder?")
    return {**load_yaml(path), **given}


def from_run_config(path: str | Path, schema: type) -> dict[str, Any]:
    """Return what a recipe or a run's config.yaml says about the fields of the dataclass `schema`.

    That is each field that RunConfig has too (the task data, the model), or that the class's `RUN_KEYS` table maps
    to its RunConfig or LoptiGRPOConfig counterpart (analyze's AdamW settings: the recipe's learning rate, betas,
    ...); the file's other keys are `lopti train`'s business and are ignored, but a key no command knows is
    refused with the closest names.
    """
    recipe = train_parser().read(path)
    run_keys = getattr(schema, "RUN_KEYS", {})
    own = {item.name for item in dataclasses.fields(schema) if item.init}
    run_fields = {item.name for item in dataclasses.fields(RunConfig)}
    return {
        name: recipe[key]
        for name in own
        if (key := run_keys.get(name, name)) in recipe and (name in run_keys or key in run_fields)
    }


def split(settings: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """Return the RunConfig and the keyword arguments for LoptiGRPOConfig, every value checked: RunConfig's by its
    `__post_init__`, the trainer's, with a weight per reward, by `LoptiGRPOConfig.check_values` (without building
    it: that sets up a device)."""
    run_fields = {item.name for item in dataclasses.fields(RunConfig) if item.init}
    run = RunConfig(**{key: value for key, value in settings.items() if key in run_fields})
    trainer_fields = {item.name for item in dataclasses.fields(LoptiGRPOConfig) if item.init}
    trainer_kwargs = {key: value for key, value in settings.items() if key in trainer_fields}
    LoptiGRPOConfig.check_values(trainer_kwargs, reward_count=len(run.reward_names(get_task(run.task))))
    return run, trainer_kwargs
