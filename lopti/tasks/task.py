"""What a task is to lopti: `TaskData`, the data settings the commands share, and `Task`, one task's record.

A task (lopti/tasks/kk, lopti/tasks/math, or one of your own, added with `lopti.tasks.registry.register_task`)
turns `TaskData` settings into (train, held-out) rows whose `prompt` is what the trainer feeds the model, names
its reward functions, judges one evaluation answer as (correct, well formed), says how its results are grouped
(K&K: by number of people; math: by level, then by operation) and how its data reads in a model card, and may bring
a `lopti data` command and a default `lopti train` recipe. Nothing outside lopti/tasks names a task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lopti.errors import UserError, check_number

# the help of a `lopti data` command's seed
SEED_HELP = "Seed of the generated data; the same seed and settings give identical files."
# the task of settings that name none: TaskData's default, and what `lopti train` and `lopti compare` take their
# recipe from when neither --task nor --config is given
DEFAULT_TASK = "math"


@dataclass
class TaskData:
    """Which prompts a task generates or reads: the settings that `lopti train`, `eval` and `analyze` share."""

    task: str = field(
        default=DEFAULT_TASK,
        metadata={"help": "Task: 'kk' (Knights and Knaves), 'math', or one registered in lopti.tasks."},
    )
    template: str | None = field(
        default=None, metadata={"help": "Prompt template; null: the task's own (kk: chatml-think, math: chat)."}
    )
    people: str = field(default="3-7", metadata={"help": "K&K sizes to train on: 5, 3-7 or 2,4,6."})
    levels: str = field(default="1-3", metadata={"help": "Math: levels of the generated problems, 1-5."})
    train_file: str | None = field(
        default=None, metadata={"help": "Math: training file (JSONL/JSON/Parquet, verl or problem/answer schema)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Math: held-out file, same formats."})
    train_puzzles: int = field(default=900, metadata={"help": "Generated training prompts per K&K size / math level."})
    eval_people: str | None = field(default=None, metadata={"help": "K&K sizes to evaluate on; null: people."})
    eval_puzzles: int = field(default=100, metadata={"help": "Generated held-out prompts per K&K size / math level."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data (train and eval)."})
    fixed_names: bool = field(
        default=False, metadata={"help": "K&K: person k always has the k-th name (for tiny models)."}
    )

    def __post_init__(self) -> None:
        check_puzzle_counts(self, fewest_train=0)  # `lopti eval` builds the held-out split alone


def check_puzzle_counts(data: object, fewest_train: int = 1) -> None:
    """Refuse fewer than `fewest_train` training prompts or a negative held-out count: what TaskData, `lopti train`'s
    settings and a task's `lopti data` settings share."""
    check_number("train_puzzles", data.train_puzzles, low=fewest_train)
    check_number("eval_puzzles", data.eval_puzzles, low=0)


def task_data_field(name: str, **changes):
    """Return a dataclass field like TaskData's `name` (its default and help) unless `changes` say otherwise:
    for settings that take only some of the task data keys, without a second copy of their defaults."""
    source = TaskData.__dataclass_fields__[name]
    return field(**{"default": source.default, "metadata": source.metadata, **changes})


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
    rows: Callable[[TaskData], tuple[list[dict], list[dict]]]  # (train, held-out) rows with a `prompt` each
    make_reward: Callable[..., Callable[..., list[float]]]  # (name, eos_token_id, pad_token_id) -> a TRL reward
    judge: Callable[[str, dict], tuple[bool, bool]]  # (answer with the prompt's prefill, row) -> (correct, formed)
    describe_data: Callable[[TaskData], str]  # the data in a few words, for the model card
    data_settings: type | None = None  # `lopti data NAME`'s dataclass: its fields are the flags, `.write()` -> paths
    recipe: str | None = None  # `lopti train --task NAME`'s recipe, a file in lopti/configs; None: field defaults
    # the TaskData keys `rows` reads besides task and template; a setting given for one it does not read is refused
    # (a K&K `people` on a math run would otherwise change nothing, silently). None: it may read every key
    data_keys: tuple[str, ...] | None = None
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

    def unread_keys(self, keys: Iterable[str]) -> list[str]:
        """Return those of `keys` that are TaskData settings this task's data does not read."""
        if self.data_keys is None:
            return []
        read = {"task", "template", *self.data_keys}
        return [key for key in keys if key in TaskData.__dataclass_fields__ and key not in read]

    def check_keys(self, sources: dict[str, str]) -> None:
        """Refuse, in one line naming its source, a given setting (key -> file or "command line") this task's
        data does not read: it would change nothing."""
        if unread := self.unread_keys(sources):
            raise UserError(
                f"{sources[unread[0]]}: {unread[0]} is a data setting the {self.name} task does not read; its own "
                f"are {', '.join(self.data_keys)}"
            )
