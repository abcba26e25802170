"""A task is one `Task` record and one registry entry: integer addition, registered here and nowhere else, runs
through `lopti data`, `lopti train` (2 steps on the tiny model) and `lopti eval` like the shipped tasks."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from lopti.cli import main
from lopti.tasks import registry
from lopti.tasks.completions import completion_text
from lopti.tasks.registry import task_data_field
from lopti.tasks.task import SEED_HELP, Task, TaskData, check_puzzle_counts


def addition_rows(data: TaskData) -> tuple[list[dict], list[dict]]:
    """Return (train, held-out) sums of two numbers of 1 or 2 digits, each split from its own seeded stream."""

    def split(count: int, stream: str) -> list[dict]:
        draw = random.Random(f"{data.data_seed}-{stream}")
        rows = []
        for index in range(count):
            digits = 1 + index % 2
            a, b = (draw.randrange(10 ** (digits - 1), 10**digits) for _ in range(2))
            rows.append({"id": f"{stream}-{index}", "prompt": f"{a}+{b}=", "answer": str(a + b), "digits": digits})
        return rows

    return split(data.train_puzzles, "train"), split(data.eval_puzzles, "test")


def addition_judge(text: str, row: dict) -> tuple[bool, bool]:
    """Return whether the answer's first word is the sum, and whether it is a number at all."""
    words = text.split()
    return bool(words) and words[0] == row["answer"], bool(words) and words[0].isdigit()


def make_addition_reward(name: str, eos_token_id: int | None = None, pad_token_id: int | None = None):
    """Return TRL's reward: 1.0 for the right sum (the one reward this task knows, "exact")."""
    if name != "exact":
        raise ValueError(f"unknown addition reward {name!r}")

    def reward(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
        return [
            float(addition_judge(completion_text(c), {"answer": a})[0])
            for c, a in zip(completions, answer, strict=True)
        ]

    reward.__name__ = "addition_exact"
    return reward


@dataclass
class AdditionData:
    """Sums of two numbers, as JSONL."""

    out: str = field(metadata={"help": "Output folder."})
    train_puzzles: int = task_data_field("train_puzzles", metadata={"help": "Train sums."})
    eval_puzzles: int = task_data_field("eval_puzzles", metadata={"help": "Test sums."})
    data_seed: int = task_data_field("data_seed", metadata={"help": SEED_HELP})

    def __post_init__(self) -> None:
        check_puzzle_counts(self)

    def write(self) -> dict[str, Path]:
        folder = Path(self.out)
        folder.mkdir(parents=True, exist_ok=True)
        data = TaskData(task="addition", train_puzzles=self.train_puzzles, eval_puzzles=self.eval_puzzles,
                        data_seed=self.data_seed)  # fmt: skip
        paths = {}
        for name, rows in zip(("train", "test"), addition_rows(data), strict=True):
            paths[name] = folder / f"{name}.jsonl"
            paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
        return paths


ADDITION = Task(
    name="addition",
    summary="sums of two numbers as JSONL",
    group="digits",
    default_template="raw",
    rewards=("exact",),
    default_rewards=("exact",),
    accuracy_reward="exact",
    ar_alpha=0.1,  # AR's α where a recipe gives none
    rows=addition_rows,
    make_reward=make_addition_reward,
    judge=addition_judge,
    describe_data=lambda data: f"{data.train_puzzles} generated sums",
    data_settings=AdditionData,
)


@pytest.fixture
def addition_task(monkeypatch):
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))  # this test's registrations end with it
    return registry.register_task(ADDITION)


def test_a_registered_task_runs_through_data_train_and_eval(addition_task, tiny_model_dir, tmp_path, capsys):
    assert main(["data", "addition", "--out", str(tmp_path / "data"), "--train_puzzles", "6"]) == 0
    written = (tmp_path / "data" / "train.jsonl").read_text().splitlines()
    assert len(written) == 6 and {"prompt", "answer", "digits"} <= json.loads(written[0]).keys()

    run_dir = tmp_path / "run"
    train = [
        "train", "--task", "addition", "--model", str(tiny_model_dir), "--train_puzzles", "16", "--eval_puzzles", "4",
        "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--max_steps", "2", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none", "--use_cpu",
        "true", "--disable_tqdm", "true", "--evaluate", "true", "--eval_max_new_tokens", "4",
        "--output_dir", str(run_dir),
    ]  # fmt: skip
    assert main(train) == 0, capsys.readouterr().err
    logs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [log["step"] for log in logs if addition_task.accuracy_metric() in log] == [1, 2]
    assert "addition (16 generated sums; template `raw`; rewards exact)" in (run_dir / "README.md").read_text()
    assert set(json.loads((run_dir / "eval_after.json").read_text())["per_group"]) == {"1", "2"}

    out = tmp_path / "eval"
    evaluate = ["eval", "--task", "addition", "--model", str(run_dir / "final"), "--eval_puzzles", "6",
                "--eval_max_new_tokens", "4", "--out", str(out)]  # fmt: skip
    assert main(evaluate) == 0, capsys.readouterr().err
    result = json.loads((out / "eval.json").read_text())
    assert result["group"] == "digits" and result["overall"]["n"] == 6
    assert "| digits | prompts |" in (out / "eval.md").read_text()


def test_a_task_name_is_registered_once(addition_task):
    with pytest.raises(ValueError, match="already registered"):
        registry.register_task(Task(**{**ADDITION.__dict__}))


def test_an_installed_package_adds_a_task_through_its_entry_point(monkeypatch):
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    entry = EntryPoint(name="addition", value=f"{__name__}:ADDITION", group="lopti.tasks")
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry] if group == "lopti.tasks" else [])
    registry.register_installed_tasks()
    assert registry.get_task("addition") is ADDITION
