"""The offline math set and the loaders: exact answers, determinism, disjoint splits, clear errors."""

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from lopti.tasks.math.data import load_math, load_math_rows, math_records, parse_levels, write_math
from lopti.tasks.math.generate import LEVELS, NAMES, THINGS, generate_problems, is_test_problem, latex_number
from lopti.tasks.math.prompts import EXAMPLE_ANSWER, EXAMPLE_PROBLEM, render_prompt
from lopti.tasks.math.reward import math_score


def sympy_side(text: str) -> sympy.Expr:
    return sympy.sympify(re.sub(r"(\d)([xy])", r"\1*\2", text))


def solved_answer(level: int, text: str) -> Fraction:
    """Return the answer of a generated problem worked out independently of the generator."""
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    if level == 1:
        return Fraction(numbers[0] + numbers[1] if "more" in text else numbers[0] - numbers[1])
    if level == 2:
        if "holds" in text:
            return Fraction(numbers[0] * numbers[1] + numbers[2])
        return Fraction(numbers[0] // numbers[1] + numbers[2])
    x, y = sympy.symbols("x y")
    if level in (3, 4):
        left, right = re.match(r"Solve for x: (.+?) = (.+?)\.", text).groups()
        (root,) = sympy.solve(sympy.Eq(sympy_side(left), sympy_side(right)), x)
        return Fraction(int(root.p), int(root.q))
    first, first_value, second, second_value, target = re.match(
        r"If (.+?) = (-?\d+) and (.+?) = (-?\d+), what is (.+?)\?", text
    ).groups()
    solution = sympy.solve(
        [sympy.Eq(sympy_side(first), int(first_value)), sympy.Eq(sympy_side(second), int(second_value))], [x, y]
    )
    value = sympy.nsimplify(sympy_side(target).subs(solution))
    return Fraction(int(value.p), int(value.q))


@pytest.mark.parametrize("level", LEVELS)
def test_every_answer_is_exact(level: int) -> None:
    for test in (False, True):
        for problem in generate_problems(60, level, seed=3, test=test):
            assert solved_answer(level, problem.text) == problem.answer, problem.text
            assert math_score(f"\\boxed{{{problem.answer_latex}}}", problem.answer_latex) == 1.0


def test_each_problem_names_the_operation_its_text_asks_for() -> None:
    verbs = {
        "addition": "gets",
        "subtraction": "gives away",
        "product, then sum": "buys",
        "quotient, then sum": "shares",
    }
    stories = {1: {"addition", "subtraction"}, 2: {"product, then sum", "quotient, then sum"}}
    for level in LEVELS:
        problems = generate_problems(60, level, seed=1, test=True)
        operations = {problem.operation for problem in problems}
        if level in stories:  # a story: its verb says the operation, and both of the level's kinds occur
            assert operations == stories[level] and all(verbs[p.operation] in p.text for p in problems)
        else:
            assert len(operations) == 1
    rows = math_records("1", train=2, test=5, seed=0)["test"]
    assert all(row["operation"] in stories[1] for row in rows)


def test_fractional_answers_are_written_in_lowest_terms() -> None:
    assert latex_number(Fraction(-11, 2)) == "-\\frac{11}{2}"
    assert latex_number(Fraction(6, 3)) == "2"
    assert any(p.answer.denominator > 1 for p in generate_problems(50, 4, seed=0, test=False))


def test_same_seed_same_problems_and_splits_are_disjoint() -> None:
    first = math_records("1-5", train=40, test=10, seed=7)
    assert first == math_records("1-5", train=40, test=10, seed=7)
    assert first != math_records("1-5", train=40, test=10, seed=8)
    train_texts = {r["problem"] for r in first["train"]}
    assert not train_texts & {r["problem"] for r in first["test"]}
    assert all(is_test_problem(r["problem"]) for r in first["test"])
    assert not any(is_test_problem(text) for text in train_texts)
    assert math_records("2", train=80, test=10, seed=7)["test"] == math_records("2", train=5, test=10, seed=7)["test"]


def test_levels_are_checked() -> None:
    assert parse_levels("1-3") == [1, 2, 3] and parse_levels("2,5") == [2, 5]
    with pytest.raises(ValueError, match="math level must be one of"):
        math_records("0-2", train=1, test=1)
    with pytest.raises(ValueError, match="levels must look like"):
        parse_levels("easy")


def test_written_files_load_back_in_both_formats(tmp_path: Path) -> None:
    written = write_math(tmp_path, levels="1,4", train=5, test=3, seed=0, template="chat")
    for name in ("train.jsonl", "train.parquet"):
        dataset = load_math(written[name], template="chat")
        assert len(dataset) == 10
        assert set(dataset.column_names) == {"prompt", "id", "level", "answer"}
        assert sorted(set(dataset["level"])) == [1, 4]
    raw = load_math(written["test.jsonl"], template="raw")
    assert isinstance(raw[0]["prompt"], str) and raw[0]["prompt"].endswith("\\boxed{}.\n")


def test_plain_and_verl_schemas(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"problem": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}"}]))
    (row,) = load_math_rows(plain, template="chat")
    assert row["answer"] == "\\frac{3}{4}" and "\\boxed{}" in row["prompt"][0]["content"]
    verl = tmp_path / "deepscaler.jsonl"
    prompt = [{"role": "user", "content": "Compute 2+2. Let's think step by step."}]
    verl.write_text(json.dumps({"prompt": prompt, "reward_model": {"ground_truth": "4"}, "data_source": "d"}) + "\n")
    (row,) = load_math_rows(verl)
    assert row["prompt"] == prompt and row["answer"] == "4" and row["data_source"] == "d"


@pytest.mark.parametrize(
    "content, message",
    [
        (
            '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n',
            r"bad\.jsonl, row 2: unknown schema \(fields problem\)",
        ),
        ('{"prompt": "1+1", "reward_model": {"ground_truth": ""}}\n', r"bad\.jsonl, row 1: no ground truth"),
        ('{"prompt": "1+1", "reward_model": {}}\n', r"bad\.jsonl, row 1: no ground truth"),
        ('{"problem": "1+1", "answer": "2"}\n{not json\n', r"bad\.jsonl, row 2: not valid JSON"),
        ("", r"bad\.jsonl: no rows"),
        ("[1, 2]\n", r"bad\.jsonl, row 1: not valid JSON|expected an object"),
    ],
)
def test_bad_files_name_the_file_and_row(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_math_rows(path)


def test_unreadable_or_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no math data file"):
        load_math_rows(tmp_path / "missing.jsonl")
    (tmp_path / "data.csv").write_text("problem,answer\n")
    with pytest.raises(ValueError, match=r"data\.csv: unknown file type"):
        load_math_rows(tmp_path / "data.csv")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"broken\.parquet: not a readable Parquet file"):
        load_math_rows(tmp_path / "broken.parquet")


def test_worked_example_template_asks_the_problem_after_a_right_example() -> None:
    (row,) = math_records(levels="1", train=1, test=0, seed=0, template="chat-example")["train"]
    example, reply, question = row["prompt"]
    assert [m["role"] for m in row["prompt"]] == ["user", "assistant", "user"]
    assert question["content"].startswith(row["problem"]) and example["content"].startswith(EXAMPLE_PROBLEM)
    assert math_score(EXAMPLE_ANSWER, latex_number(solved_answer(1, EXAMPLE_PROBLEM))) == 1.0
    assert reply["content"] == EXAMPLE_ANSWER
    # no generated problem can be the example: its name and its noun are not the generator's
    assert not any(name in EXAMPLE_PROBLEM for name in NAMES) and not any(t in EXAMPLE_PROBLEM for t in THINGS)


def test_a_file_with_worked_example_prompts_reads_the_asked_problem(tmp_path: Path) -> None:
    prompt = render_prompt("What is 2 + 2?", "chat-example")
    path = tmp_path / "verl.jsonl"
    path.write_text(json.dumps({"prompt": prompt, "reward_model": {"ground_truth": "4"}}) + "\n")
    (row,) = load_math_rows(path)
    assert row["problem"] == prompt[-1]["content"] and row["prompt"] == prompt
