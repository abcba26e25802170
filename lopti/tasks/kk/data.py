"""K&K datasets: records in lopti's and verl/Logic-RL's schema, files, and 🤗 `DatasetDict`s."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lopti.tasks.counts import check_counts
from lopti.tasks.export import write_splits
from lopti.tasks.kk.generate import MAX_PEOPLE, MIN_PEOPLE, Puzzle, check_shape, generate_splits
from lopti.tasks.kk.prompts import prefill, puzzle_prompt, render_prompt
from lopti.tasks.kk.render import DEFAULT_ROLES, NAMES, Roles, pick_names, render_quiz, render_solution

SPLITS = ("train", "test")


def parse_people(spec: str | int | Iterable[int]) -> list[int]:
    """Return the sizes in a people spec: 5, "3-7", "2,4,6" or a list; each checked against the limits."""
    if isinstance(spec, int):
        sizes = [spec]
    elif isinstance(spec, str):
        try:
            sizes = []
            for part in spec.split(","):
                low, _, high = part.strip().partition("-")
                sizes.extend(range(int(low), int(high or low) + 1))
        except ValueError:
            raise ValueError(f"people must look like 5, 3-7 or 2,4,6; got {spec!r}") from None
    else:
        sizes = list(spec)
    if not sizes:
        raise ValueError(f"people spec {spec!r} names no size")
    for size in sizes:
        if not isinstance(size, int) or not MIN_PEOPLE <= size <= MAX_PEOPLE:
            raise ValueError(f"people must be from {MIN_PEOPLE} to {MAX_PEOPLE}, got {size!r} in {spec!r}")
    return sorted(set(sizes))


def puzzle_record(
    puzzle: Puzzle,
    split: str,
    index: int,
    seed: int | str,
    template: str,
    roles: Roles = DEFAULT_ROLES,
    fixed_names: bool = False,
) -> dict[str, Any]:
    """Return one dataset row: the puzzle, its text, its prompt, and the verl/Logic-RL fields.

    `fixed_names` gives person k the k-th name of `NAMES` in every puzzle (for tiny models, which then
    need not learn to copy names and can spend their capacity on the logic).
    """
    rng = random.Random(f"kk-text|{seed}|{split}|{puzzle.people}|{index}")
    names = list(NAMES[: puzzle.people]) if fixed_names else pick_names(rng, puzzle.people)
    quiz = render_quiz(puzzle.statements, names, rng, roles)
    solution_text = render_solution(names, puzzle.solution, roles)
    return {
        "id": f"kk-{puzzle.people}p-{split}-{index:05d}",
        "people": puzzle.people,
        "names": names,
        "statements": puzzle.statements,
        "solution": puzzle.solution,
        "solution_text": solution_text,
        "quiz": quiz,
        "prompt": puzzle_prompt(puzzle.statements, names, quiz, template, roles),
        "roles": list(roles),
        "data_source": f"kk_logic{puzzle.people}",
        "ability": "logic",
        "reward_model": {
            "style": "rule",
            "ground_truth": {
                "solution_text_format": solution_text,
                "names": names,
                "solution": puzzle.solution,
            },
        },
        "extra_info": {"split": split, "index": index, "template": template, "prefill": prefill(template)},
    }


def kk_records(
    people: str | int | Iterable[int] = "3-7",
    train: int = 900,
    test: int = 100,
    seed: int | str = 0,
    template: str = "chatml-think",
    depth: int = 2,
    width: int = 2,
    roles: Roles = DEFAULT_ROLES,
    test_people: str | int | Iterable[int] | None = None,
    fixed_names: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Return {"train": rows, "test": rows}: `train` puzzles per size in `people` and `test` per size in
    `test_people` (default: `people`). Per size, both splits come from one stream and never overlap."""
    render_prompt("", 2, template, roles)  # fail on an unknown template before generating anything
    check_counts(train=train, test=test)
    check_shape(depth, width)
    train_sizes = parse_people(people)
    test_sizes = train_sizes if test_people is None else parse_people(test_people)
    records: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    for size in sorted(set(train_sizes) | set(test_sizes)):
        counts = (train if size in train_sizes else 0, test if size in test_sizes else 0)
        splits = generate_splits(size, *counts, seed, depth, width)
        for split, puzzles in zip(SPLITS, splits, strict=True):
            records[split] += [
                puzzle_record(p, split, i, seed, template, roles, fixed_names) for i, p in enumerate(puzzles)
            ]
    return records


def arrow_row(record: dict[str, Any]) -> dict[str, Any]:
    """Return `record` with `statements` as a JSON string: Arrow cannot store lists mixing str and int."""
    return {**record, "statements": json.dumps(record["statements"], separators=(",", ":"))}


def kk_dataset(**kwargs: Any):
    """Return a `datasets.DatasetDict` with train and test splits; arguments as for `kk_records`."""
    from datasets import Dataset, DatasetDict

    records = kk_records(**kwargs)
    return DatasetDict({split: Dataset.from_list([arrow_row(r) for r in rows]) for split, rows in records.items()})


def write_kk(out_dir: str | Path, **kwargs: Any) -> dict[str, Path]:
    """Write {split}.jsonl (nested statements) and {split}.parquet (JSON statements); return the paths."""
    return write_splits(out_dir, kk_records(**kwargs), arrow_row)
