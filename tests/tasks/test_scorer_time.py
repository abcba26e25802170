"""Every scorer takes time linear in the completion's length.

Each scorer meets 64 KB completions built to make a backtracking pattern or a rescan blow up (quadratic
code took seconds to hours on these). Asserted: a generous absolute bound, and that 4× the length costs
far less than the 16× of quadratic time. Times are the best of a few runs, so a busy machine does not fail
the test.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from lopti.tasks.kk.rewards import SCORERS as KK_SCORERS
from lopti.tasks.math.reward import extract_answer, format_score, math_score

NAMES = ["Ann", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus"]
SOLUTION = [True, False, True, False, True, True, False]
LARGE = 64 * 1024
SMALL = LARGE // 4
BOUND_S = 1.0  # about 50 ms on an idle machine


def repeated(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


def in_answer(unit: str) -> Callable[[int], str]:
    return lambda size: f"<think>x</think><answer>{repeated(unit)(size)}</answer>"


KK_TEXTS = {
    "'<' and spaces": lambda size: "<" + " " * size,
    "'< /' and spaces": lambda size: "< /" + " " * size,
    "'<' and spaces, repeated": repeated("<    "),
    "<answer> repeated": repeated("<answer>"),
    "</answer> repeated": repeated("</answer>"),
    "think tags repeated": repeated("</think><think>"),
    "name and spaces": lambda size: "Ann" + " " * size + "is",
    "one long word": lambda size: "a" * size,
    "answer: spaces": in_answer(" "),
    "answer: new lines": in_answer("\n"),
    "answer: assignments": in_answer("Ann is a knight\n"),
    "answer: unclosed enumerators": in_answer("(1"),
    "answer: names": in_answer("Ann "),
    "answer: list marks": in_answer("- "),
    "prose: conditionals": repeated("If Ann is a knight then Bob is a knave, "),
    "prose: contractions": repeated("isn't "),
}
MATH_TEXTS = {
    "unclosed boxes": repeated("\\boxed{"),
    "closing braces then unclosed boxes": lambda size: "}" * (size // 2) + repeated("\\boxed{")(size // 2),
    "complete boxes": repeated("\\boxed{1}"),
    "box commands without braces": repeated("\\boxed"),
    "box and spaces": lambda size: "\\boxed" + " " * size,
    "box and open braces": lambda size: "\\boxed{" + "{" * size,
    "nested braces": lambda size: "\\boxed{" + "{" * (size // 2) + "}" * (size // 2) + "}",
    "think tags repeated": repeated("</think><think>\\boxed{1}"),
}
MATH_SCORERS = {
    "extract_answer": extract_answer,
    "math_format": format_score,
    "math": lambda text: math_score(text, "5"),
}


def best_time(score: Callable[[str], object], text: str, runs: int = 3) -> float:
    """Return the best of `runs` timings, with the garbage collector off as timeit has it: a collection's pause is not
    the scorer's, and math-verify's SIGALRM timeout raised inside a collection's callback (hypothesis installs one)
    is swallowed as an unraisable exception instead of ending the parse."""
    times = []
    gc.disable()
    try:
        for _ in range(runs):
            started = time.perf_counter()
            score(text)
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return min(times)


def assert_linear(score: Callable[[str], object], build: Callable[[int], str]) -> None:
    score(build(64))  # warm up: compiled patterns, math-verify's import
    small, large = best_time(score, build(SMALL)), best_time(score, build(LARGE))
    assert large < BOUND_S, f"{large:.3f} s for {LARGE} characters"
    assert large < 10 * small + 0.02, f"{small:.4f} s -> {large:.4f} s for 4x the length"


@pytest.mark.parametrize("scorer", sorted(KK_SCORERS))
@pytest.mark.parametrize("text", sorted(KK_TEXTS))
def test_kk_scorers_take_linear_time(scorer, text):
    assert_linear(lambda t: KK_SCORERS[scorer](t, NAMES, SOLUTION), KK_TEXTS[text])


@pytest.mark.parametrize("scorer", sorted(MATH_SCORERS))
@pytest.mark.parametrize("text", sorted(MATH_TEXTS))
def test_math_scorers_take_linear_time(scorer, text):
    assert_linear(MATH_SCORERS[scorer], MATH_TEXTS[text])
