"""What a task is to lopti: `TaskData`, the data settings the commands share, and `Task`, one task's record.

A task (lopti/tasks/kk, lopti/tasks/math, or one of your own, added with `lopti.tasks.registry.register_task`)
turns `TaskData` settings into (train, held-out) rows whose `prompt` is what the trainer feeds the model, names
its reward functions, judges one evaluation answer as (correct, well formed), says how its results are grouped
(K&K: by number of people; math: by level, then by operation) and how its data reads in a model card, and may bring
its own data settings, a `lopti data` command and a default `lopti train` recipe. Nothing outside lopti/tasks names
a task or one of its own settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from lopti.errors import check_number

# the help of a `lopti data` command's seed
SEED_HELP = "Seed of the generated data; the same seed and settings give identical files."
# the task of settings that name none: TaskData's default, and what `lopti train` and `lopti compare` take their
# recipe from when neither --task nor --config is given
DEFAULT_TASK = "math"


@dataclass
class TaskData:
    """Which prompts a task generates or reads: the data settings every task has. A task's own (its sizes, levels or
    files) are those of a subclass, its `Task.data`, which `lopti train`, `eval` and `analyze` take as flags
    (`lopti.tasks.registry.TaskSettings`)."""

    task: str = field(default=DEFAULT_TASK, metadata={"help": "Task: one that lopti.tasks.registry knows."})
    template: str | None = field(default=None, metadata={"help": "Prompt template; null: the task's own."})
    train_puzzles: int = field(default=900, metadata={"help": "Generated training prompts per group of the task."})
    eval_puzzles: int = field(default=100, metadata={"help": "Generated held-out prompts per group of the task."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data (train and eval)."})
    # the keys that choose the training prompts alone: a held-out set is the same whatever their values
    training_only: ClassVar[tuple[str, ...]] = ("train_puzzles",)
    # the keys that choose the held-out prompts alone: the training prompts are the same whatever their values
    evaluation_only: ClassVar[tuple[str, ...]] = ("eval_puzzles",)

    def __post_init__(self) -> None:
        check_puzzle_counts(self, fewest_train=0)  # `lopti eval` builds the held-out split alone

    def held_out_only(self) -> Self:
        """Return these settings with no training prompts: the held-out split alone, as `lopti eval` builds it."""
        return replace(self, train_puzzles=0)

    def has_held_out(self) -> bool:
        """Return whether these settings give any held-out prompt."""
        return self.eval_puzzles > 0


def check_puzzle_counts(data: object, fewest_train: int = 1) -> None:
    """Refuse fewer than `fewest_train` training prompts or a negative held-out count: what TaskData, `lopti train`'s
    settings and a task's `lopti data` settings share."""
    check_number("train_puzzles", data.train_puzzles, low=fewest_train)
    check_number("eval_puzzles", data.eval_puzzles, low=0)


def data_field(source: type, name: str, **changes):
    """Return a dataclass field like the dataclass `source`'s `name` (its default and help) unless `changes` say
    otherwise: for settings that take only some of a task's data keys, without a second copy of their defaults."""
    origin = source.__dataclass_fields__[name]
    return field(**{"default": origin.default, "metadata": origin.metadata, **changes})


@dataclass(frozen=True)
class TaskModels:
    """The embedded models a task builds from its own text: an untrained base model and its supervised warm
    starts. The task says what they are; lopti.models names, builds, caches and ships them, so the model layer
    needs no task's code (K&K's: lopti/tasks/kk/task.py)."""

    base: str  # the untrained model's name
    build_base: Callable[[Path], None]  # writes it (weights and tokenizer) to a folder, the same on every call
    # each warm-started model's name -> the settings in which its warm start differs from `warm_start_settings()`
    warm_started: Mapping[str, Mapping[str, object]]
    warm_start_settings: Callable[[], object]  # the warm start's settings dataclass; its defaults: the shipped ones
    warm_start: Callable[[Path, Path, object], object]  # (base folder, output folder, settings): writes the warm start


@dataclass(frozen=True)
class Task:
    """One task: its data, prompts, rewards and judge, and how its results are grouped and worded."""

    name: str
    summary: str  # one line: what the prompts are (`lopti data NAME`'s help)
    group: str  # the row key evaluation results are grouped by, e.g. "people" or "level"
    default_template: str  # the prompt template when TaskData's `template` is null
    rewards: tuple[str, ...]  # the reward names `make_reward` knows
    default_rewards: tuple[str, ...]  # what `rewards` is when a run gives none
    accuracy_reward: str  # the reward that says whether an answer is right; always logged
    # AR's α where the settings give none (or 0: a GRPO recipe that `lopti compare` adds AR to): the value the
    # paper, or the task's own study, found right for it, since the best α depends on the task
    ar_alpha: float
    rows: Callable[[TaskData], tuple[list[dict], list[dict]]]  # (train, held-out) rows of a `data`, each a `prompt`
    make_reward: Callable[..., Callable[..., list[float]]]  # (name, eos_token_id, pad_token_id) -> a TRL reward
    judge: Callable[[str, dict], tuple[bool, bool]]  # (answer with the prompt's prefill, row) -> (correct, formed)
    describe_data: Callable[[TaskData], str]  # a `data` in a few words, for the model card
    data_settings: type | None = None  # `lopti data NAME`'s dataclass: its fields are the flags, `.write()` -> paths
    recipe: str | None = None  # `lopti train --task NAME`'s recipe, a file in lopti/configs; None: field defaults
    # the task's data settings: TaskData's and its own, which `rows` and `describe_data` read
    data: type[TaskData] = TaskData
    # further row keys held-out results are broken down by, where a row has them (math: "operation")
    breakdown: tuple[str, ...] = ()
    # the embedded models built from this task's own text, which lopti.models builds, caches and ships by name
    models: TaskModels | None = None

    def accuracy_metric(self) -> str:
        """Return the metrics.jsonl key of the accuracy reward's batch mean (TRL logs a reward under its
        function's name)."""
        return f"rewards/{self.make_reward(self.accuracy_reward).__name__}/mean"

    def prompt_template(self, data: TaskData) -> str:
        """Return the template `data`'s prompts take: its `template`, or this task's default one."""
        return data.template or self.default_template

    def own_data(self, settings: Mapping[str, Any]) -> TaskData:
        """Return this task's data settings (a `data`) from `settings`, each key it has not at its default."""
        keys = {item.name for item in fields(self.data) if item.init}
        return self.data(**{key: value for key, value in settings.items() if key in keys} | {"task": self.name})
