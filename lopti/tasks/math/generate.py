"""An offline math set: seeded arithmetic and algebra word problems with exact answers, five levels.

Level 1: one addition or subtraction in a story; 2: two steps with a product or a quotient; 3: a linear
equation with an integer root; 4: a linear equation with unknowns on both sides and a fractional root;
5: two linear equations, asking for a combination of both unknowns. Answers are exact (`Fraction`) and
written in LaTeX (7, -3, \\frac{11}{2}). As for K&K, a fixed ~20% of problem texts (by hash) is reserved
for test splits, so training data of any seed never contains a test problem.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from fractions import Fraction

LEVELS = (1, 2, 3, 4, 5)
TEST_BYTE_LIMIT = 52  # first hash byte below this: ≈ 20% of problems are test-only
NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "June", "Kai", "Lena", "Milo", "Nia")
THINGS = ("apples", "marbles", "stickers", "books", "coins", "pencils", "shells", "stamps", "cards", "beads")
CONTAINERS = ("box", "bag", "jar", "crate", "packet")


@dataclass(frozen=True)
class Problem:
    """A problem text, its exact answer, and the operation it asks for (held-out results are broken down by it)."""

    level: int
    text: str
    answer: Fraction
    operation: str

    @property
    def answer_latex(self) -> str:
        return latex_number(self.answer)


def latex_number(value: Fraction) -> str:
    """Return a rational number in LaTeX: an integer, or a signed \\frac{p}{q} in lowest terms."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _linear(coefficient: int, constant: int, variable: str = "x") -> str:
    """Return "3x + 5" / "-x - 2" / "4x" for coefficient·variable + constant."""
    head = {1: variable, -1: f"-{variable}"}.get(coefficient, f"{coefficient}{variable}")
    if constant == 0:
        return head
    return f"{head} {'+' if constant > 0 else '-'} {abs(constant)}"


def _level1(rng: random.Random) -> Problem:
    name, things = rng.choice(NAMES), rng.choice(THINGS)
    have, change = rng.randint(5, 60), rng.randint(2, 40)
    if rng.random() < 0.5:
        text = f"{name} has {have} {things} and gets {change} more. How many {things} does {name} have now?"
        return Problem(1, text, Fraction(have + change), "addition")
    have += change
    text = f"{name} has {have} {things} and gives away {change}. How many {things} does {name} have left?"
    return Problem(1, text, Fraction(have - change), "subtraction")


def _level2(rng: random.Random) -> Problem:
    name, things, container = rng.choice(NAMES), rng.choice(THINGS), rng.choice(CONTAINERS)
    per, count, extra = rng.randint(3, 12), rng.randint(2, 9), rng.randint(1, 20)
    if rng.random() < 0.5:
        text = (
            f"A {container} holds {per} {things}. {name} buys {count} {_plural(container)} and finds {extra} more "
            f"{things}. How many {things} does {name} have?"
        )
        return Problem(2, text, Fraction(per * count + extra), "product, then sum")
    total = per * count
    text = (
        f"{name} shares {total} {things} equally among {count} friends, then gives each friend {extra} more. "
        f"How many {things} does each friend have?"
    )
    return Problem(2, text, Fraction(per + extra), "quotient, then sum")


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("x", "s")) else "s")


def _level3(rng: random.Random) -> Problem:
    root, coefficient = rng.randint(-12, 12), rng.choice([c for c in range(-9, 10) if c not in (0, 1)])
    constant = rng.randint(-30, 30)
    text = f"Solve for x: {_linear(coefficient, constant)} = {coefficient * root + constant}."
    return Problem(3, text, Fraction(root), "linear equation")


def _level4(rng: random.Random) -> Problem:
    while True:
        left, right = rng.randint(2, 12), rng.randint(-9, 9)
        if left != right and right != 0:
            break
    a, b = rng.randint(-20, 20), rng.randint(-20, 20)
    root = Fraction(b - a, left - right)
    text = f"Solve for x: {_linear(left, a)} = {_linear(right, b)}. Give x exactly."
    return Problem(4, text, root, "x on both sides")


def _level5(rng: random.Random) -> Problem:
    x, y = rng.randint(-9, 9), rng.randint(-9, 9)
    while True:
        a, b, c, d = (rng.choice([k for k in range(-6, 7) if k != 0]) for _ in range(4))
        if a * d - b * c != 0:
            break
    first = f"{_linear(a, 0)} {'+' if b > 0 else '-'} {_linear(abs(b), 0, 'y')}"
    second = f"{_linear(c, 0)} {'+' if d > 0 else '-'} {_linear(abs(d), 0, 'y')}"
    p, q = rng.randint(1, 5), rng.choice([-3, -2, -1, 1, 2, 3])
    target = f"{_linear(p, 0)} {'+' if q > 0 else '-'} {_linear(abs(q), 0, 'y')}"
    text = f"If {first} = {a * x + b * y} and {second} = {c * x + d * y}, what is {target}?"
    return Problem(5, text, Fraction(p * x + q * y), "two equations")


MAKERS = {1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5}


def is_test_problem(text: str) -> bool:
    """Return True for the fixed ~20% of problem texts reserved for test splits."""
    return hashlib.sha256(text.encode()).digest()[0] < TEST_BYTE_LIMIT


def check_level(level: int) -> None:
    """Raise a ValueError unless `level` is one of LEVELS."""
    if level not in LEVELS:
        raise ValueError(f"math level must be one of {', '.join(map(str, LEVELS))}, got {level!r}")


def generate_problems(count: int, level: int, seed: int | str, test: bool) -> list[Problem]:
    """Return `count` distinct problems of one level from the test or the train share of problem texts."""
    check_level(level)
    rng = random.Random(f"math|{seed}|{level}|{'test' if test else 'train'}")
    problems: dict[str, Problem] = {}
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(f"found only {len(problems)} of {count} distinct level-{level} problems")
        problem = MAKERS[level](rng)
        if is_test_problem(problem.text) == test and problem.text not in problems:
            problems[problem.text] = problem
    return list(problems.values())
