"""The math task: generated word problems or a file of problems, math-verify's reward, grouped by level and
operation."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Self

from lopti.errors import check_output_folder
from lopti.tasks.math import reward
from lopti.tasks.math.data import load_math_rows, math_records, trainer_rows, write_math
from lopti.tasks.task import SEED_HELP, Task, TaskData, check_puzzle_counts, data_field

DEFAULT_TEMPLATE = "chat"


@dataclass
class MathTaskData(TaskData):
    """Which problems a run trains and is evaluated on: generated ones of some levels, or a pair of files."""

    levels: str = field(default="1-3", metadata={"help": "Levels of the generated problems, 1-5."})
    train_file: str | None = field(
        default=None, metadata={"help": "Training file (JSONL/JSON/Parquet, verl or problem/answer schema)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Held-out file, same formats."})
    training_only: ClassVar[tuple[str, ...]] = ("train_puzzles", "train_file")
    evaluation_only: ClassVar[tuple[str, ...]] = ("eval_puzzles", "eval_file")

    def held_out_only(self) -> Self:
        """Return these settings with no training prompts; a held-out file stands in for the training file."""
        return replace(self, train_puzzles=0, train_file=self.eval_file)

    def has_held_out(self) -> bool:
        """Return whether these settings give any held-out problem: generated ones, or a file's."""
        return super().has_held_out() or bool(self.eval_file)


def math_rows(run: MathTaskData) -> tuple[list[dict], list[dict]]:
    """Return the (train, held-out) rows: the files' problems, or generated ones, prompts in the trainer's format."""
    template = MATH.prompt_template(run)
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
    return reward.math_score(text, row["answer"]) == 1.0, reward.extract_answer(text) is not None


def describe_math(run: MathTaskData) -> str:
    """Return the run's problems in a few words."""
    if run.train_file:
        return f"problems from {run.train_file}"
    return f"levels {run.levels}, {run.train_puzzles} generated problems per level"


@dataclass
class MathData:
    """Generated math word problems with exact answers, in the verl schema."""

    out: str = field(metadata={"help": "Output folder."})
    levels: str = data_field(MathTaskData, "levels", metadata={"help": "Levels 1-5: 2, 1-3 or 1,3,5."})
    train_puzzles: int = data_field(
        TaskData, "train_puzzles", default=1000, metadata={"help": "Train problems per level."}
    )
    eval_puzzles: int = data_field(TaskData, "eval_puzzles", metadata={"help": "Test problems per level."})
    data_seed: int = data_field(TaskData, "data_seed", metadata={"help": SEED_HELP})
    template: str | None = data_field(TaskData, "template")

    def __post_init__(self) -> None:
        check_puzzle_counts(self)

    def write(self) -> dict[str, Path]:
        """Write the files; return their paths by name."""
        check_output_folder(self.out, "--out")
        return write_math(
            self.out,
            levels=self.levels,
            train=self.train_puzzles,
            test=self.eval_puzzles,
            seed=self.data_seed,
            template=self.template or DEFAULT_TEMPLATE,
        )


MATH = Task(
    name="math",
    summary="generated math word problems as JSONL and Parquet (verl schema)",
    group="level",
    default_template=DEFAULT_TEMPLATE,
    rewards=tuple(reward.SCORERS),
    default_rewards=("math",),
    accuracy_reward="math",
    ar_alpha=0.1,  # docs/paper.md §8: AR's α on math
    rows=math_rows,
    make_reward=reward.make_math_reward,
    judge=math_judge,
    describe_data=describe_math,
    data_settings=MathData,
    recipe="math-smollm2-ar-cpu.yaml",
    data=MathTaskData,
    breakdown=("operation",),
)
