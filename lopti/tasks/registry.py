"""The tasks `lopti train` and `lopti eval` know: data, reward functions and the evaluation judge of each.

A task turns `TaskData` settings into (train, held-out) rows whose `prompt` is what the trainer feeds the model,
names its reward functions, and judges one evaluation answer as (correct, well formed). Evaluation
breaks results down by `group` (K&K: number of people; math: level).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lopti.tasks.kk import rewards as kk_rewards
from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.prompts import trainer_prompt as kk_trainer_prompt
from lopti.tasks.kk.render import DEFAULT_ROLES
from lopti.tasks.math import reward as math_reward
from lopti.tasks.math.data import load_math_rows, math_records, trainer_rows


@dataclass
class TaskData:
    """Which prompts a task generates or reads: the settings that `lopti train`, `eval` and `analyze` share."""

    task: str = field(default="kk", metadata={"help": "Task: 'kk' (Knights and Knaves) or 'math'."})
    template: str | None = field(
        default=None, metadata={"help": "Prompt template; null: the task's own (kk: chatml-think, math: chat)."}
    )
    people: str = field(default="3-7", metadata={"help": "K&K sizes to train on: 5, 3-7 or 2,4,6."})
    levels: str = field(default="1-3", metadata={"help": "Math: levels of the generated problems, 1-5."})
    train_file: str | None = field(
        default=None, metadata={"help": "Math: training file (JSONL/JSON/Parquet, verl or problem/answer schema)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Math: held-out file, same formats."})
    train_puzzles: int = field(
        default=900, metadata={"help": "Generated training prompts per K&K size / math level.", "min": 1}
    )
    eval_people: str | None = field(default=None, metadata={"help": "K&K sizes to evaluate on; null: people."})
    eval_puzzles: int = field(
        default=100, metadata={"help": "Generated held-out prompts per K&K size / math level.", "min": 0}
    )
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data (train and eval)."})
    fixed_names: bool = field(
        default=False, metadata={"help": "K&K: person k always has the k-th name (for tiny models)."}
    )

    def prompt_template(self) -> str:
        """Return the template the prompts take: `template`, or the task's default one."""
        return self.template or get_task(self.task).default_template


def task_data_field(name: str, **changes):
    """Return a dataclass field like TaskData's `name` (its default and help) unless `changes` say otherwise:
    for settings that take only some of the task data keys, without a second copy of their defaults."""
    source = TaskData.__dataclass_fields__[name]
    return field(**{"default": source.default, "metadata": source.metadata, **changes})


@dataclass(frozen=True)
class Task:
    """One task: how to build its rows, its rewards, and how to judge an evaluation answer."""

    name: str
    group: str
    default_template: str
    rewards: tuple[str, ...]
    accuracy_reward: str
    rows: Callable[[TaskData], tuple[list[dict], list[dict]]]
    make_reward: Callable[..., Callable[..., list[float]]]
    judge: Callable[[str, dict], tuple[bool, bool]]

    def accuracy_metric(self) -> str:
        """Return the metrics.jsonl key of the accuracy reward's batch mean (TRL logs a reward under its
        function's name)."""
        return f"rewards/{self.make_reward(self.accuracy_reward).__name__}/mean"


def _kk_rows(run: TaskData) -> tuple[list[dict], list[dict]]:
    template = run.prompt_template()
    records = kk_records(
        people=run.people,
        train=run.train_puzzles,
        test=run.eval_puzzles,
        seed=run.data_seed,
        template=template,
        test_people=run.eval_people,
        fixed_names=run.fixed_names,
    )
    keep = ("id", "people", "names", "solution", "roles")
    return tuple(
        [{"prompt": kk_trainer_prompt(r["prompt"], template), **{k: r[k] for k in keep}} for r in records[split]]
        for split in ("train", "test")
    )


def kk_judge(text: str, row: dict) -> tuple[bool, bool]:
    """Return whether a K&K answer names every role right (the accuracy reward's 1) and is strictly well formed."""
    roles = tuple(row.get("roles") or DEFAULT_ROLES)
    correct = kk_rewards.accuracy(text, row["names"], row["solution"], roles) == 1.0
    return correct, kk_rewards.strict_answer(text) is not None


def _math_rows(run: TaskData) -> tuple[list[dict], list[dict]]:
    template = run.prompt_template()
    if run.train_file or run.eval_file:
        if not (run.train_file and run.eval_file):
            raise ValueError("task math: give both train_file and eval_file, or neither (generated problems)")
        return tuple(trainer_rows(load_math_rows(f, template), template) for f in (run.train_file, run.eval_file))
    records = math_records(
        run.levels, train=run.train_puzzles, test=run.eval_puzzles, seed=run.data_seed, template=template
    )
    return tuple(trainer_rows(records[split], template) for split in ("train", "test"))


def math_judge(text: str, row: dict) -> tuple[bool, bool]:
    """Return whether a math answer is equivalent to the reference (math-verify) and has an answer to extract."""
    return math_reward.math_score(text, row["answer"]) == 1.0, math_reward.extract_answer(text) is not None


TASKS = {
    "kk": Task(
        name="kk",
        group="people",
        default_template="chatml-think",
        rewards=tuple(kk_rewards.SCORERS),
        accuracy_reward="accuracy",
        rows=_kk_rows,
        make_reward=kk_rewards.make_reward,
        judge=kk_judge,
    ),
    "math": Task(
        name="math",
        group="level",
        default_template="chat",
        rewards=tuple(math_reward.SCORERS),
        accuracy_reward="math",
        rows=_math_rows,
        make_reward=math_reward.make_math_reward,
        judge=math_judge,
    ),
}


def get_task(name: str) -> Task:
    """Return the task called `name`, or raise a ValueError listing the known ones."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]
