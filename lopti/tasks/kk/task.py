"""The Knights-and-Knaves task: generated puzzles, the Logic-RL rewards, grouped by the number of people; the
embedded tiny models built from K&K text and warm-started on its puzzles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from lopti.errors import check_output_folder
from lopti.tasks.kk import rewards
from lopti.tasks.kk.data import kk_records, write_kk
from lopti.tasks.kk.prompts import trainer_prompt
from lopti.tasks.kk.render import DEFAULT_ROLES
from lopti.tasks.kk.tiny import build_tiny_base
from lopti.tasks.kk.warmstart import WarmStartConfig, warm_start
from lopti.tasks.task import SEED_HELP, Task, TaskData, TaskModels, check_puzzle_counts, data_field

DEFAULT_TEMPLATE = "chatml-think"


@dataclass
class KKTaskData(TaskData):
    """Which puzzles a run trains and is evaluated on: TaskData's settings, and the puzzles' sizes and names."""

    people: str = field(default="3-7", metadata={"help": "Sizes (people per puzzle) to train on: 5, 3-7 or 2,4,6."})
    eval_people: str | None = field(default=None, metadata={"help": "Sizes to evaluate on; null: people."})
    fixed_names: bool = field(default=False, metadata={"help": "Person k always has the k-th name (for tiny models)."})
    evaluation_only: ClassVar[tuple[str, ...]] = ("eval_puzzles", "eval_people")


def kk_rows(run: KKTaskData) -> tuple[list[dict], list[dict]]:
    """Return the (train, held-out) rows of the run's generated puzzles, prompts in the trainer's format."""
    template = KK.prompt_template(run)
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
        [{"prompt": trainer_prompt(r["prompt"], template), **{k: r[k] for k in keep}} for r in records[split]]
        for split in ("train", "test")
    )


def kk_judge(text: str, row: dict) -> tuple[bool, bool]:
    """Return whether a K&K answer names every role right (the accuracy reward's 1) and is strictly well formed."""
    roles = tuple(row.get("roles") or DEFAULT_ROLES)
    correct = rewards.accuracy(text, row["names"], row["solution"], roles) == 1.0
    return correct, rewards.strict_answer(text) is not None


def describe_kk(run: KKTaskData) -> str:
    """Return the run's puzzles in a few words."""
    return f"{run.people} people, {run.train_puzzles} generated puzzles per size"


@dataclass
class KKData:
    """Knights-and-Knaves puzzles, in the lopti and verl/Logic-RL schemas."""

    out: str = field(metadata={"help": "Output folder."})
    people: str = data_field(KKTaskData, "people", metadata={"help": "Sizes: 5, 3-7 or 2,4,6."})
    train_puzzles: int = data_field(TaskData, "train_puzzles", metadata={"help": "Train puzzles per size."})
    eval_puzzles: int = data_field(TaskData, "eval_puzzles", metadata={"help": "Test puzzles per size."})
    data_seed: int = data_field(TaskData, "data_seed", metadata={"help": SEED_HELP})
    template: str | None = data_field(TaskData, "template")
    depth: int = field(default=2, metadata={"help": "Maximum statement depth."})
    width: int = field(default=2, metadata={"help": "Maximum operands of and/or."})

    def __post_init__(self) -> None:
        check_puzzle_counts(self)

    def write(self) -> dict[str, Path]:
        """Write the files; return their paths by name."""
        check_output_folder(self.out, "--out")
        return write_kk(
            self.out, people=self.people, train=self.train_puzzles, test=self.eval_puzzles, seed=self.data_seed,
            template=self.template or DEFAULT_TEMPLATE, depth=self.depth, width=self.width,
        )  # fmt: skip


# `tiny-base`, and its warm starts: `tiny` on traces in the plain form, `tiny-varied` on traces in the varied form,
# whose free choices put the sampled tokens' probability shares near an LLM's (docs/results.md)
TINY_MODELS = TaskModels(
    base="tiny-base",
    build_base=build_tiny_base,
    warm_started={"tiny": {}, "tiny-varied": {"trace_form": "varied"}},
    warm_start_settings=WarmStartConfig,
    warm_start=warm_start,
)

KK = Task(
    name="kk",
    summary="Knights-and-Knaves puzzles as JSONL and Parquet",
    group="people",
    default_template=DEFAULT_TEMPLATE,
    rewards=tuple(rewards.SCORERS),
    default_rewards=("logic_rl",),
    accuracy_reward="accuracy",
    ar_alpha=0.3,  # docs/paper.md §4, §7: AR's α on K&K with Lopti (0.2 alone)
    rows=kk_rows,
    make_reward=rewards.make_reward,
    judge=kk_judge,
    describe_data=describe_kk,
    data_settings=KKData,
    recipe="kk-tiny-cpu.yaml",
    data=KKTaskData,
    models=TINY_MODELS,
)
