"""`lopti data kk|math`: write a task's generated train and test splits as JSONL and Parquet files.

The sizes and the seed are `lopti train`'s task data keys (`TaskData`): the same values give the same puzzles
or problems that `lopti train` generates, its held-out ones as the test split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lopti.errors import check_output_folder
from lopti.tasks.kk.data import write_kk
from lopti.tasks.math.data import write_math
from lopti.tasks.registry import get_task, task_data_field

SEED_HELP = "Seed of the generated data (a number or a word); the same seed and settings give identical files."


@dataclass
class KKData:
    """Knights-and-Knaves puzzles, in the lopti and verl/Logic-RL schemas."""

    out: str = field(metadata={"help": "Output folder."})
    people: str = task_data_field("people", metadata={"help": "Sizes: 5, 3-7 or 2,4,6."})
    train_puzzles: int = task_data_field("train_puzzles", metadata={"help": "Train puzzles per size.", "min": 1})
    eval_puzzles: int = task_data_field("eval_puzzles", metadata={"help": "Test puzzles per size.", "min": 0})
    data_seed: int | str = task_data_field("data_seed", metadata={"help": SEED_HELP})
    template: str | None = task_data_field("template")
    depth: int = field(default=2, metadata={"help": "Maximum statement depth."})
    width: int = field(default=2, metadata={"help": "Maximum operands of and/or."})

    def write(self) -> dict[str, Path]:
        """Write the files; return their paths by name."""
        check_output_folder(self.out, "--out")
        return write_kk(
            self.out, people=self.people, train=self.train_puzzles, test=self.eval_puzzles, seed=self.data_seed,
            template=self.template or get_task("kk").default_template, depth=self.depth, width=self.width,
        )  # fmt: skip


@dataclass
class MathData:
    """Generated math word problems with exact answers, in the verl schema."""

    out: str = field(metadata={"help": "Output folder."})
    levels: str = task_data_field("levels", metadata={"help": "Levels 1-5: 2, 1-3 or 1,3,5."})
    train_puzzles: int = task_data_field(
        "train_puzzles", default=1000, metadata={"help": "Train problems per level.", "min": 1}
    )
    eval_puzzles: int = task_data_field("eval_puzzles", metadata={"help": "Test problems per level.", "min": 0})
    data_seed: int | str = task_data_field("data_seed", metadata={"help": SEED_HELP})
    template: str | None = task_data_field("template")

    def write(self) -> dict[str, Path]:
        """Write the files; return their paths by name."""
        check_output_folder(self.out, "--out")
        return write_math(
            self.out,
            levels=self.levels,
            train=self.train_puzzles,
            test=self.eval_puzzles,
            seed=self.data_seed,
            template=self.template or get_task("math").default_template,
        )
