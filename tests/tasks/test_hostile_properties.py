"""Property-based hostile completions (hypothesis): every scorer, K&K and math, on generated wrong answers wrapped
in arbitrary text, returns a finite value in its range and never its maximum.

Each test runs `LOPTI_PROPERTY_EXAMPLES` examples per scorer (10,000 unless set, as in CI), derandomized
so that a failure reproduces. A K&K answer is the right one with at least one person tampered with (the wrong
role, a look-alike role word, a negated or conditional line, a second role, left out), and arbitrary text around
it in the reasoning and as clauses of its own in the answer; a math response ends on a wrong \\boxed{} after
arbitrary text without digits, so that no text can spell the right integer.
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lopti.tasks.kk.render import NAMES
from lopti.tasks.kk.rewards import SCORERS
from lopti.tasks.math.reward import format_score, math_score

EXAMPLES = int(os.environ.get("LOPTI_PROPERTY_EXAMPLES", "10000"))
RANGES = {
    "logic_rl": (-3.0, 3.0),
    "strict": (-3.0, 3.0),
    "partial": (0.0, 1.0),
    "lenient": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
}
STRICT_FAMILY = ("strict", "partial", "accuracy")  # the scorers that must refuse every tampering below
LOOKALIKES = [
    "\u212anight",
    "kn\u0456ght",
    "ｋｎｉｇｈｔ",
    "kn\u200bight",
    "\u212anave",
    "kn\u0430ve",
    "ᴋɴᴀᴠᴇ",
    "knav\u0435",
]
TAMPERINGS = ("wrong", "lookalike", "negated", "conditional", "both", "missing")
PIECES = ["<think>", "</think>", "<answer>", "</answer>", "(1)", " is a ", "knight", "knave", " not ", " if ", ",", "."]
# Text with anything but newlines (clause ends the answer keeps) and, for math, digits.
FREE_TEXT = st.text(st.characters(exclude_characters="\n"), max_size=40) | st.sampled_from(PIECES)
NO_DIGITS = st.text(st.characters(exclude_categories=("Nd",)), max_size=60) | st.sampled_from(
    ["\\boxed{", "}", "</think>"]
)
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip


def role(truthful: bool) -> str:
    return "knight" if truthful else "knave"


@st.composite
def wrong_kk_answers(draw) -> tuple[str, list[str], list[bool]]:
    """Return (assistant text, names, solution) whose answer block states someone's role wrongly or not plainly."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=2, max_size=5, unique=True))
    solution = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    lines = [f"({k}) {name} is a {role(s)}" for k, (name, s) in enumerate(zip(names, solution, strict=True), start=1)]
    person = draw(st.integers(0, len(names) - 1))
    name, right, wrong = names[person], role(solution[person]), role(not solution[person])
    tampering = draw(st.sampled_from(TAMPERINGS))
    if tampering == "wrong":
        lines[person] = f"({person + 1}) {name} is a {wrong}"
    elif tampering == "lookalike":
        lines[person] = f"({person + 1}) {name} is a {draw(st.sampled_from(LOOKALIKES))}"
    elif tampering == "negated":
        lines[person] = f"It is not true that {name} is a {right}"
    elif tampering == "conditional":
        lines[person] = f"If {name} is a {right} then {names[(person + 1) % len(names)]} is a {wrong}"
    elif tampering == "both":
        lines.insert(draw(st.integers(0, len(lines))), f"{name} is a {draw(st.sampled_from([wrong, *LOOKALIKES]))}")
    else:
        del lines[person]
    for _ in range(draw(st.integers(0, 3))):  # arbitrary clauses of their own in the answer
        lines.insert(draw(st.integers(0, len(lines))), draw(FREE_TEXT))
    think = draw(st.text(max_size=80))
    return f"<think>{think}</think>\n<answer>{chr(10).join(lines)}</answer>{draw(FREE_TEXT)}", names, solution


@pytest.mark.slow
@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_no_wrong_kk_answer_earns_the_maximum_and_every_value_is_finite_and_in_range(scorer):
    score, (low, high) = SCORERS[scorer], RANGES[scorer]

    @SETTINGS
    @given(wrong_kk_answers())
    def check(case):
        text, names, solution = case
        value = score(text, names, solution)
        assert isinstance(value, float) and math.isfinite(value) and low <= value <= high, (value, text)
        if scorer in STRICT_FAMILY:
            assert value < high, (value, text)

    check()


@st.composite
def wrong_math_responses(draw) -> tuple[str, str]:
    """Return (response, ground truth): arbitrary text without digits, then a wrong integer boxed last."""
    truth = draw(st.integers(-1000, 1000))
    wrong = draw(st.integers(-1000, 1000).filter(lambda n: n != truth))
    return f"{draw(NO_DIGITS)}\\boxed{{{wrong}}}{draw(NO_DIGITS)}", str(truth)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # math-verify's timer in a GC callback
@pytest.mark.parametrize("scorer", ["math_score", "format_score"])
def test_no_wrong_math_answer_earns_credit_and_every_value_is_0_or_1(scorer):
    score = {"math_score": math_score, "format_score": format_score}[scorer]

    @SETTINGS
    @given(wrong_math_responses())
    def check(case):
        response, truth = case
        value = score(response, truth)
        assert value in (0.0, 1.0), (value, response)
        if scorer == "math_score":
            assert value == 0.0, (truth, response)

    check()
