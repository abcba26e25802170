"""The math task: generated word problems or a file of problems, math-verify's reward, grouped by level and
operation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lopti.errors import check_output_folder
from lopti.tasks.math import reward
from lopti.tasks.math.data import load_math_rows, math_records, trainer_rows, write_math
from lopti.tasks.task import SEED_HELP, Task, TaskData, check_puzzle_counts, task_data_field

DEFAULT_TEMPLATE = "chat"


def math_rows(run: TaskData) -> tuple[list[dict], list[dict]]:
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


def describe_math(run: TaskData) -> str:
    """Return the run's problems in a few words."""
    if run.train_file:
        return f"problems from {run.train_file}"
    return f"levels {run.levels}, {run.train_puzzles} generated problems per level"


@dataclass
class MathData:
    """Generated math word problems with exact answers, in the verl schema."""

    out: str = field(metadata={"help": "Output folder."})
    levels: str = task_data_field("levels", metadata={"help": "Levels 1-5: 2, 1-3 or 1,3,5."})
    train_puzzles: int = task_data_field("train_puzzles", default=1000, metadata={"help": "Train problems per level."})
    eval_puzzles: int = task_data_field("eval_puzzles", metadata={"help": "Test problems per level."})
    data_seed: int = task_data_field("data_seed", metadata={"help": SEED_HELP})
    template: str | None = task_data_field("template")

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
    data_keys=("levels", "train_file", "eval_file", "train_puzzles", "eval_puzzles", "data_seed"),
    breakdown=("operation",),
)
