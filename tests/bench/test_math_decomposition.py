"""bench/math_decomposition.py: a level-1 answer split into the set-up of its sum and its arithmetic."""

import importlib
from pathlib import Path

import pytest

from lopti.tasks.math.generate import generate_problems

BENCH = Path(__file__).resolve().parents[2] / "bench"
GIVES = "Milo has 78 apples and gives away 26. How many apples does Milo have left?"
GETS = "Cleo has 46 stickers and gets 35 more. How many stickers does Cleo have now?"


@pytest.fixture
def decomposition(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("math_decomposition")


@pytest.mark.parametrize(
    "problem, answer, set_up, arithmetic",
    [
        (GIVES, "Milo has 78 - 26 = 52 apples.\n\n\\boxed{52}", True, True),
        (GIVES, "so he has 78 − 26 = 42 apples left", True, False),  # the sum right, the subtraction wrong
        (GIVES, "78 + 26 = 104", False, True),  # the wrong operation, added right
        (GIVES, "26 - 78 = 52", False, False),  # the operands swapped
        (GETS, "35 + 46 = 81", True, True),  # an addition's operands in either order
        (GETS, "46 - 35 = 11", False, True),
        (GETS, "46 × 35 = 81", False, False),
        (GETS, "first 46 - 35 = 11, then 46 + 35 = 81", True, True),  # the last equation counts
    ],
)
def test_an_answer_is_split_into_set_up_and_arithmetic(decomposition, problem, answer, set_up, arithmetic):
    steps = decomposition.answer_steps(answer, decomposition.problem_sum(problem))
    assert steps == {"equation": True, "set_up": set_up, "arithmetic": arithmetic}


def test_an_answer_without_an_equation_counts_as_neither(decomposition):
    assert decomposition.answer_steps("He gives away 26 apples. \\boxed{26}", decomposition.problem_sum(GIVES)) == {
        "equation": False,
        "set_up": False,
        "arithmetic": False,
    }


def test_every_generated_level_1_problem_is_read(decomposition):
    """The problem reader knows every level-1 text the generator writes, and its sum gives the problem's answer."""
    for problem in generate_problems(200, 1, seed=0, test=True):
        have, operation, change = decomposition.problem_sum(problem.text)
        assert (have + change if operation == "+" else have - change) == problem.answer
