"""Math data: the offline generated set, and loaders for DeepScaleR/verl and plain {problem, answer} files.

Rows everywhere carry lopti's fields (`id`, `level`, `problem`, `answer`, `prompt` as chat messages; generated
ones also the `operation` they ask for) and the verl schema (`data_source`, `ability`, `reward_model.ground_truth`,
`extra_info`), so the same file trains with `lopti train` and with verl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lopti.tasks.counts import check_counts
from lopti.tasks.export import write_splits
from lopti.tasks.math.generate import generate_problems
from lopti.tasks.math.prompts import render_prompt, trainer_prompt

SUFFIXES = (".jsonl", ".json", ".parquet")


def parse_levels(spec: str | int) -> list[int]:
    """Return the levels in "2", "1-3" or "1,3,5"."""
    text = str(spec)
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            return list(range(low, high + 1))
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"levels must look like 2, 1-3 or 1,3,5, got {spec!r}") from None


def math_records(
    levels: str | int = "1-3", train: int = 1000, test: int = 100, seed: int | str = 0, template: str = "chat"
) -> dict[str, list[dict[str, Any]]]:
    """Return {"train": rows, "test": rows}: `train` and `test` generated problems per level."""
    check_counts(train=train, test=test)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for split, count in (("train", train), ("test", test)):
        for level in parse_levels(levels):
            for problem in generate_problems(count, level, seed, test=split == "test"):
                index = len(splits[split])
                splits[split].append(
                    {
                        "id": f"math-l{level}-{split}-{index:05d}",
                        "level": level,
                        "operation": problem.operation,
                        "problem": problem.text,
                        "answer": problem.answer_latex,
                        "prompt": render_prompt(problem.text, template),
                        "data_source": f"lopti_math_l{level}",
                        "ability": "math",
                        "reward_model": {"style": "rule", "ground_truth": problem.answer_latex},
                        "extra_info": {"split": split, "index": index, "level": level, "template": template},
                    }
                )
    return splits


def write_math(out_dir: str | Path, **kwargs: Any) -> dict[str, Path]:
    """Write {split}.jsonl and {split}.parquet of `math_records(**kwargs)`; return the paths."""
    return write_splits(out_dir, math_records(**kwargs))


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Return the rows of a JSONL, JSON (list of objects) or Parquet file; errors name the file and row."""
    if not path.is_file():
        raise FileNotFoundError(f"no math data file at {path}")
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: unknown file type {path.suffix!r}; use one of {', '.join(SUFFIXES)}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as error:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{path}: not a readable Parquet file ({error})") from None
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of rows, got {type(rows).__name__}")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, row {number}: not valid JSON ({error.msg})") from None
    return rows


def _problem_of(prompt: Any) -> str:
    """Return the user text of a verl prompt (chat messages or a string)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ValueError("its prompt has no user message")
    return str(users[-1])


def normalise_row(row: Any, template: str) -> dict[str, Any]:
    """Return a row of either schema as {problem, answer, prompt, data_source, level}; ValueError if neither."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object, got {type(row).__name__}")
    if "reward_model" in row and "prompt" in row:  # DeepScaleR / verl
        truth = (row["reward_model"] or {}).get("ground_truth")
        problem, prompt = _problem_of(row["prompt"]), row["prompt"]
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
    elif "problem" in row and "answer" in row:  # plain
        truth, problem = row["answer"], row["problem"]
        prompt = render_prompt(str(problem), template)
    else:
        raise ValueError(
            f"unknown schema (fields {', '.join(sorted(row)) or 'none'}); expected prompt + "
            "reward_model.ground_truth (verl) or problem + answer"
        )
    if truth is None or (isinstance(truth, str) and not truth.strip()):
        raise ValueError("no ground truth")
    level = row.get("level") or (row.get("extra_info") or {}).get("level") or 0
    return {
        "problem": str(problem),
        "answer": truth if isinstance(truth, str) else json.dumps(truth),
        "prompt": prompt,
        "data_source": str(row.get("data_source", "math")),
        "level": int(level),
    }


def load_math_rows(path: str | Path, template: str = "chat") -> list[dict[str, Any]]:
    """Return normalised rows of a math file; a bad row raises a ValueError naming the file and row."""
    path = Path(path)
    rows = []
    for number, row in enumerate(_read_rows(path), start=1):
        try:
            rows.append({"id": f"{path.stem}-{number:06d}", **normalise_row(row, template)})
        except ValueError as error:
            raise ValueError(f"{path}, row {number}: {error}") from None
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def trainer_rows(rows: list[dict[str, Any]], template: str) -> list[dict[str, Any]]:
    """Return rows with `prompt` in the form the trainer feeds the model, and only the fields it needs (a generated
    problem's operation too, which held-out results are broken down by)."""
    kept = ("id", "level", "answer", "operation")
    return [{"prompt": trainer_prompt(r["prompt"], template), **{k: r[k] for k in kept if k in r}} for r in rows]


def load_math(path: str | Path, template: str = "chat"):
    """Return a 🤗 Dataset (prompt, id, level, answer) of a DeepScaleR/verl or {problem, answer} file."""
    from datasets import Dataset

    return Dataset.from_list(trainer_rows(load_math_rows(path, template), template))
