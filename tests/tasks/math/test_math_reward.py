"""Golden cases for the math reward: equivalent forms, wrong answers, format, adversarial input."""

import threading

import pytest

from lopti.tasks.completions import final_text
from lopti.tasks.math.reward import (
    MAX_ANSWER_CHARS,
    compute_score,
    extract_answer,
    format_score,
    last_boxed,
    make_math_reward,
    math_score,
    value_to_grade,
)
from lopti.tasks.math.verify import DEFAULT_TIMEOUT_S


@pytest.mark.parametrize(
    "response, truth",
    [
        ("so the answer is \\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),
        ("\\boxed{\\frac12}", "0.5"),
        ("\\boxed{1/2}", "\\boxed{\\frac{1}{2}}"),
        ("\\boxed{-\\frac{11}{2}}", "-5.5"),
        ("\\boxed{3.0}", "3"),
        ("\\boxed{x = 7}", "7"),
        ("\\boxed{\\dfrac{\\sqrt{2}}{2}}", "\\frac{\\sqrt2}{2}"),
        ("\\boxed{ 42 }", "42"),
        ("first \\boxed{5}, then corrected: \\boxed{6}", "6"),
        ("\\fbox{12}", "12"),
        ("\\boxed{\\frac{\\frac{1}{2}}{2}}", "1/4"),  # nested braces
    ],
)
def test_equivalent_forms_score_one(response: str, truth: str) -> None:
    assert math_score(response, truth) == 1.0


@pytest.mark.parametrize(
    "response, truth",
    [
        ("\\boxed{6}", "5"),
        ("\\boxed{0.51}", "1/2"),
        ("the answer is 5", "5"),  # no box
        ("\\boxed{5} wait, no: \\boxed{4}", "5"),  # only the last box counts
        ("\\boxed{}", "0"),
        ("\\boxed{5", "5"),  # never closed
        ("", "5"),
        ("<think>\\boxed{5}</think> I am not sure.", "5"),  # the box is inside the reasoning
    ],
)
def test_wrong_or_missing_answers_score_zero(response: str, truth: str) -> None:
    assert math_score(response, truth) == 0.0


def test_only_text_after_think_is_graded() -> None:
    assert final_text("a</think>b</think>c") == "c"
    assert math_score("<think>maybe \\boxed{4}</think>The answer is \\boxed{5}.", "5") == 1.0
    assert math_score("<think>maybe \\boxed{5}</think>The answer is \\boxed{4}.", "5") == 0.0
    assert math_score("no think tags \\boxed{5}", "5") == 1.0


def test_last_boxed_skips_an_unclosed_box_for_an_earlier_complete_one() -> None:
    assert last_boxed("\\boxed{1} and \\boxed{2") == "1"
    assert last_boxed("\\boxed {7}") == "7"
    assert last_boxed("\\boxed 7") is None


def test_format_only_variant_ignores_correctness() -> None:
    assert format_score("\\boxed{999}", "5") == 1.0
    assert format_score("999", "5") == 0.0
    assert format_score("<think>\\boxed{5}</think>", "5") == 0.0


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{" + "{" * 500 + "}" * 500 + "}",
        "\\boxed{\\frac{1}{0}}",
        "\\boxed{\\left( \\right.}",
        "\\boxed{9^{9^{9^{9}}}}",
        "\\boxed{\\begin{pmatrix} 1 & 2 \\end{pmatrix}}",
        "\\boxed{\x00\x01\x02}",
        "}" * 1000 + "\\boxed{" * 1000,
        "\\boxed{" + "x+" * 2000 + "1}",
    ],
)
# math-verify's SIGALRM timer can fire inside a garbage-collector callback, where Python only reports it
# as "unraisable" and the parse goes on; the score is still 0 or 1.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_adversarial_strings_never_raise(response: str) -> None:
    assert math_score(response, "5") in (0.0, 1.0)


def test_every_math_verify_call_gets_the_time_limit_in_the_main_thread(monkeypatch) -> None:
    import math_verify

    limits = []
    real_parse, real_verify = math_verify.parse, math_verify.verify

    def parse(*args, **kwargs):
        limits.append(("parse", kwargs.get("parsing_timeout")))
        return real_parse(*args, **kwargs)

    def verify(*args, **kwargs):
        limits.append(("verify", kwargs.get("timeout_seconds")))
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(math_verify, "parse", parse)
    monkeypatch.setattr(math_verify, "verify", verify)
    assert math_score("\\boxed{0.5}", "1/2") == 1.0
    assert limits == [("parse", DEFAULT_TIMEOUT_S), ("parse", DEFAULT_TIMEOUT_S), ("verify", DEFAULT_TIMEOUT_S)]
    limits.clear()
    worker = threading.Thread(target=lambda: math_score("\\boxed{0.5}", "1/2"))
    worker.start()
    worker.join()
    assert limits == []  # off the main thread math-verify runs in the helper process, where its timer works


def test_very_long_output_is_graded() -> None:
    assert math_score("Let me think. " * 20_000 + "\\boxed{5}", "5") == 1.0
    assert math_score("\\boxed{5}" + " and so on" * 20_000, "5") == 1.0


def test_overlong_answer_is_no_answer() -> None:
    assert extract_answer("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}") is None


def test_scoring_works_off_the_main_thread() -> None:
    results = []
    worker = threading.Thread(target=lambda: results.append(math_score("\\boxed{0.5}", "1/2")))
    worker.start()
    worker.join()
    assert results == [1.0]


def test_trl_reward_checks_the_end_of_sequence_on_ids() -> None:
    reward = make_math_reward("math", eos_token_id=2, pad_token_id=0)
    completions = ["\\boxed{5}", "\\boxed{5}", "\\boxed{4}", [{"role": "assistant", "content": "\\boxed{5}"}]]
    ids = [[7, 2], [7, 7], [7, 2], [7, 2]]
    assert reward(["p"] * 4, completions, answer=["5"] * 4, completion_ids=ids) == [1.0, 0.0, 0.0, 1.0]
    assert reward.__name__ == "math"
    with pytest.raises(ValueError, match="unknown math reward 'maths'"):
        make_math_reward("maths")


def test_verl_hook() -> None:
    assert compute_score("lopti_math_l3", "x = \\boxed{-3}", "-3") == 1.0
    assert compute_score("lopti_math_l3", "\\boxed{3}", "-3") == 0.0


@pytest.mark.parametrize(
    ("answer", "truth", "graded"),
    [
        ("x = 3", "3", " 3"),
        ("\\theta_1 = \\frac{1}{2}", "1/2", " \\frac{1}{2}"),
        ("AB=5", "5", "5"),
        ("4 = 3", "3", None),  # a relation between numbers is a statement, not a value
        ("4 - 1 = 3", "3", None),
        ("x = 4 = 3", "3", None),
        ("3 \\approx 4", "3", None),
        ("x \\approx 3", "3", None),
        ("3 \\equiv 8", "3", None),
        ("\\pi = 3", "3", None),
        ("3\\%", "3", None),  # a percentage the ground truth does not have
        ("3\\%", "0.03", None),
        ("3\\text{ percent}", "3", None),
        ("3\\%", "3\\%", "3\\%"),
        ("y = 2x + 1", "y = 2x + 1", "y = 2x + 1"),  # the ground truth is a relation: compared whole
        ("\\frac{1}{2}", "0.5", "\\frac{1}{2}"),
    ],
)
def test_value_to_grade(answer: str, truth: str, graded: str | None) -> None:
    assert value_to_grade(answer, truth) == graded


@pytest.mark.parametrize(
    ("response", "truth", "score"),
    [
        ("\\boxed{4 = 3}", "3", 0.0),
        ("\\boxed{3 \\approx 4}", "3", 0.0),
        ("\\boxed{3\\%}", "3", 0.0),
        ("\\boxed{3\\%}", "0.03", 0.0),
        ("\\boxed{3\\%}", "3\\%", 1.0),
        ("\\boxed{a = 3}", "3", 1.0),
        ("\\boxed{x > 2}", "x > 2", 1.0),
        ("</think>\\boxed{4}<think>\\boxed{3}", "3", 0.0),  # a box in a reopened reasoning block does not count
        ("</think>\\boxed{3}<think>\\boxed{4}", "3", 1.0),
        ("<think>\\boxed{3}", "3", 1.0),  # no "</think>": the whole response counts (DeepScaleR)
    ],
)
def test_answers_that_state_a_relation_or_a_percentage_and_reopened_reasoning(response, truth, score) -> None:
    assert math_score(response, truth) == score


def test_box_extraction_pairs_braces_once() -> None:
    assert last_boxed("\\boxed{" * 1000 + "7}") == "7"
    assert last_boxed("\\boxed{1}" + "\\boxed{" * 1000) == "1"
    assert last_boxed("}" * 10 + "\\boxed{2}}") == "2"
    assert last_boxed("{\\boxed{3}") == "3"
    assert last_boxed("\\fbox {4} \\boxed{5") == "4"
