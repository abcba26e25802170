"""Hostile completions against every scorer.

Over 10,000 seeded completions in families built to win credit without the right answer (look-alike role
words, negated or conditional answer lines, retractions, answers hidden in the reasoning...), plus random
junk, plus every hand-written case. Each scorer must return a finite value in its range, its parsers must
not raise, and no wrong-answer family may earn the credit it is after. Families a scorer deliberately
accepts are named where they are exempted (docs/guides/kk.md, docs/guides/math.md).
"""

from __future__ import annotations

import math
import random

import pytest

from lopti.tasks.completions import final_text
from lopti.tasks.kk.render import NAMES as ALL_NAMES
from lopti.tasks.kk.rewards import (
    SCORERS,
    accuracy,
    lenient_score,
    logic_rl_score,
    partial_score,
    strict_answer,
    strict_parse,
    strict_score,
)
from lopti.tasks.math.reward import extract_answer, format_score, last_boxed, math_score, value_to_grade

RANGES = {
    "logic_rl": {3.0, -0.5, -1.0, -3.0},
    "strict": {3.0, -0.5, -1.0, -3.0},
    "partial": (0.0, 1.0),
    "lenient": (0.0, 1.0),
    "accuracy": {0.0, 1.0},
}
KK_PER_PUZZLE = 10  # completions in a row per puzzle, so that the scorers' compiled patterns stay in `re`'s cache
KK_COMPLETIONS = 10_000
MATH_COMPLETIONS = 2_000

# Role words that Unicode case folding matches but that are not "knight"/"knave" in ASCII (item 3), and
# others that only look alike.
LOOKALIKES = {
    "knight": [
        "knıght",
        "knİght",
        "KNİGHT",
        "\u212anight",
        "\u212aNIGHT",
        "kn\u0131ght",
        "knіght",
        "ｋｎｉｇｈｔ",
        "kni\u0307ght",
    ],
    "knave": ["\u212anave", "\u212aNAVE", "knаve", "knavе", "ｋｎａｖｅ", "kn\u200bave"],
}
NEGATIONS = [
    "It is false that {name} is a {role}",
    "It is not true that {name} is a {role}",
    "{name} is a {role} is false",
    "{name} is a {role}? No",
    "~{name} is a {role}",
    "It isn't the case that {name} is a {role}",
    "Never {name} is a {role}",
]
CONDITIONS = [
    "If {name} is a {role} then {other} is a {other_role}",
    "If {name} is a {role}, then {other} is a {other_role}",
    "{name} is a {role} if {other} is a {other_role}",
    "{name} is a {role} only if {other} is a {other_role}",
    "{name} is a {role} unless {other} is a {other_role}",
    "Suppose {name} is a {role}",
    "Assuming {name} is a {role}",
    "Maybe {name} is a {role}",
    "{name} is a {role} or a {wrong}",
    "Either {name} is a {role} or {name} is a {wrong}",
    "Whether {name} is a {role} is unclear",
]
# A negation in a clause of its own, which lenient (clause by clause, for prose) does not connect to the statement
NEGATED_APART = ["Not: {name} is a {role}", "False: {name} is a {role}", "{name} is a {role}. Not"]
RETRACTIONS = [
    "None of the above is true.",
    "All of this is false.",
    "Not.",
    "Just kidding, this is wrong.",
    "Perhaps.",
]


def counted_by_logic_rl(word: str) -> bool:
    """Return True iff Logic-RL's substring count (of the lower-cased answer) counts `word` as a role word."""
    return "knight" in word.lower() or "knave" in word.lower()


def role_of(truthful: bool) -> str:
    return "knight" if truthful else "knave"


def reasoning(names: list[str], rng: random.Random) -> str:
    """Return a reasoning text full of role statements, which no scorer may read as the answer."""
    return " ".join(
        f"Suppose {rng.choice(names)} is a {rng.choice(['knight', 'knave'])}." for _ in range(rng.randrange(5))
    )


def assistant(answer: str, think: str = "Let me reason.") -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def lines(names: list[str], roles: list[str]) -> list[str]:
    return [f"({k}) {name} is a {role}" for k, (name, role) in enumerate(zip(names, roles, strict=True), start=1)]


def right_answers(names: list[str], solution: list[bool], rng: random.Random) -> str:
    """Return the right answer in one of the forms every scorer accepts."""
    roles = [role_of(s) for s in solution]
    form = rng.randrange(4)
    if form == 0:
        return "\n".join(lines(names, roles))
    if form == 1:
        return " ".join(lines(names, roles))
    if form == 2:
        clauses = [f"{name} is a {role}" for name, role in zip(names, roles, strict=True)]
        return ", ".join(clauses[:-1]) + f" and {clauses[-1]}." if len(clauses) > 1 else clauses[0]
    return "\n".join(line.upper() if i % 2 else line for i, line in enumerate(lines(names, roles)))


def wrong_family(family: str, names: list[str], solution: list[bool], rng: random.Random) -> str:
    """Return an assistant text in `family` that does not state the right role of one person plainly."""
    person = rng.randrange(len(names))
    other = (person + 1) % len(names)
    roles = [role_of(s) for s in solution]
    answer = lines(names, roles)
    right, wrong = roles[person], role_of(not solution[person])
    fill = {"name": names[person], "other": names[other], "other_role": roles[other], "wrong": wrong}
    if family == "wrong_role":
        answer[person] = f"({person + 1}) {names[person]} is a {wrong}"
    elif family == "lookalike":
        word = rng.choice(LOOKALIKES[rng.choice([right, wrong])])
        answer[person] = f"({person + 1}) {names[person]} is a {word}"
        if not counted_by_logic_rl(word) and rng.random() < 0.5:
            answer.append("Knave.")  # one more role word, so that Logic-RL's count lets it read the roles
    elif family == "negated":
        answer[person] = rng.choice(NEGATIONS).format(**fill, role=rng.choice([right, wrong]))
    elif family == "negated_apart":
        answer[person] = rng.choice(NEGATED_APART).format(**fill, role=rng.choice([right, wrong]))
    elif family == "conditional":
        answer[person] = rng.choice(CONDITIONS).format(**fill, role=right)
    elif family == "missing":
        del answer[person]
    elif family == "both_roles":
        answer.insert(person + 1, f"{names[person]} is a {wrong}")
    elif family == "outside_answer":
        return assistant("See my reasoning.", think="\n".join(answer))
    elif family == "reopened_think":
        answer[person] = f"{names[person]} is a {wrong}"
        return assistant("\n".join(answer), think=reasoning(names, rng)) + "<think>" + "\n".join(lines(names, roles))
    elif family == "retraction":
        answer.append(rng.choice(RETRACTIONS))
    return assistant("\n".join(answer), think=reasoning(names, rng))


# Which scorers must refuse the credit a family is after; the others accept it by design:
# logic_rl is Logic-RL's reward and reads "Name is a role" wherever it stands; lenient reads prose and
# takes the last plain statement of each role clause by clause, so a negation or retraction in a clause of its
# own does not undo it.
KK_FAMILIES = {
    "wrong_role": set(SCORERS),
    "lookalike": set(SCORERS),
    "negated": set(SCORERS) - {"logic_rl"},
    "negated_apart": set(SCORERS) - {"logic_rl", "lenient"},
    "conditional": set(SCORERS) - {"logic_rl"},
    "missing": set(SCORERS),
    "both_roles": set(SCORERS),
    "outside_answer": set(SCORERS),
    "reopened_think": set(SCORERS),
    "retraction": set(SCORERS) - {"logic_rl", "lenient"},
}


def full_credit(scorer: str, value: float, people: int) -> bool:
    """Return True iff `value` gives the credit a wrong answer is after: all of it, or the tampered person's."""
    if scorer in ("partial", "lenient"):
        return value > (people - 1) / people + 1e-9
    return value == max(RANGES[scorer])


def junk(rng: random.Random, names: list[str]) -> str:
    pieces = ["<think>", "</think>", "<answer>", "</answer>", "< answer >", "</ THINK>", "(1)", " is a ", "knight",
              "knave", "KNIGHT", "knıght", "\u212anight", " not ", " if ", ",", ".", "\n", " ", "and", "<", ">", "{",
              "\x00", "é", "🙂", *names]  # fmt: skip
    return "".join(rng.choice(pieces) for _ in range(rng.randrange(60)))


def kk_cases() -> list[tuple[str, list[str], list[bool], str]]:
    """Return (assistant text, names, solution, family) for every generated K&K completion."""
    rng = random.Random(14)
    families = ["right", "junk", *KK_FAMILIES]
    cases = []
    for i in range(KK_COMPLETIONS):
        if i % KK_PER_PUZZLE == 0:
            names = rng.sample(ALL_NAMES, rng.randint(2, 7))
            solution = [rng.random() < 0.5 for _ in names]
        family = families[i % len(families)]
        if family == "right":
            text = assistant(right_answers(names, solution, rng), think=reasoning(names, rng))
        elif family == "junk":
            text = junk(rng, names)
        else:
            text = wrong_family(family, names, solution, rng)
        cases.append((text, names, solution, family))
    return cases


KK_CASES = kk_cases()


def test_there_are_enough_generated_completions():
    assert len(KK_CASES) + MATH_COMPLETIONS >= 10_000
    assert len({text for text, *_ in KK_CASES}) > 9_000  # not the same few texts over and over


def test_every_kk_scorer_gives_a_finite_value_in_its_range_and_no_credit_to_wrong_families():
    for text, names, solution, family in KK_CASES:
        answer = strict_answer(text)  # the parsers themselves must not raise, not only the scorers
        if answer is not None:
            strict_parse(answer, names)
        for name, scorer in SCORERS.items():
            value = scorer(text, names, solution)
            assert isinstance(value, float) and math.isfinite(value), (name, text)
            allowed = RANGES[name]
            assert value in allowed if isinstance(allowed, set) else allowed[0] <= value <= allowed[1], (name, text)
            if family == "right":
                assert value == max(RANGES[name]), (name, text)  # the families are hostile, not unreadable
            elif family in KK_FAMILIES and name in KK_FAMILIES[family]:
                assert not full_credit(name, value, len(names)), (name, family, value, text)


def test_the_evaluation_judge_gives_no_credit_to_wrong_families():
    from lopti.tasks.registry import TASKS

    judge = TASKS["kk"].judge
    for text, names, solution, family in KK_CASES[:2_000]:
        correct, _ = judge(text, {"names": names, "solution": solution})
        if family == "right":
            assert correct, text
        elif family != "junk":
            assert not correct, (family, text)


NAMES = ["Ann", "Bob", "Zoe"]
SOLUTION = [True, False, True]  # Ann a knight, Bob a knave, Zoe a knight
# Item 3: a knave called a look-alike of "knight", with one more role word so Logic-RL's count passes.
UNICODE_CASES = [
    assistant(
        f"(1) Ann is a knight\n(2) Bob is a {word}\n(3) Zoe is a knight"
        + ("" if counted_by_logic_rl(word) else " Knave.")
    )
    for word in ("knıght", "knİght", "KNİGHT", "\u212anight")
] + [assistant("(1) Ann is a \u212anight\n(2) Bob is a \u212anave\n(3) Zoe is a \u212anight")]
# Item 15: negated or conditional answer lines that state the right roles only if read literally or not at all.
NEGATED_CASES = [
    assistant("(1) Ann is a knight\n(2) It is false that Bob is a knight\n(3) Zoe is a knight"),
    assistant("(1) Ann is a knight\n(2) Bob is a knave\n(3) It is false that Zoe is a knight"),
    assistant("(1) If Ann is a knight then Bob is a knave\n(2) Bob is a knave\n(3) Zoe is a knight"),
    assistant("(1) Ann is a knight\n(2) Bob is a knave\n(3) If Zoe is a knight, then Ann is a knight"),
    assistant("(1) Ann is a knight if Bob is a knave\n(2) Bob is a knave\n(3) Zoe is a knight"),
    assistant("(1) Ann is a knight\n(2) Bob is a knave\n(3) Zoe is a knight\nNone of the above is true."),
]


@pytest.mark.parametrize("text", UNICODE_CASES)
def test_a_look_alike_role_word_earns_nothing_from_any_scorer(text):
    assert logic_rl_score(text, NAMES, SOLUTION) == -0.5  # Logic-RL's value: the role matches neither word
    assert strict_score(text, NAMES, SOLUTION) == -1.0
    assert partial_score(text, NAMES, SOLUTION) == 0.0
    assert accuracy(text, NAMES, SOLUTION) == 0.0
    assert lenient_score(text, NAMES, SOLUTION) <= 2 / 3


@pytest.mark.parametrize("text", NEGATED_CASES)
def test_a_negated_or_conditional_answer_line_earns_nothing_from_the_strict_scorers(text):
    from lopti.tasks.registry import TASKS

    assert strict_score(text, NAMES, SOLUTION) == -1.0
    assert partial_score(text, NAMES, SOLUTION) == 0.0
    assert accuracy(text, NAMES, SOLUTION) == 0.0
    assert TASKS["kk"].judge(text, {"names": NAMES, "solution": SOLUTION}) == (False, True)


def test_logic_rl_keeps_logic_rls_reading_of_negated_lines():
    # Logic-RL reads "Zoe is a knight" inside "It is false that Zoe is a knight": documented, kept.
    assert logic_rl_score(NEGATED_CASES[1], NAMES, SOLUTION) == 3.0
    assert logic_rl_score(NEGATED_CASES[0], NAMES, SOLUTION) == -0.5


def test_lenient_skips_negated_and_conditional_statements():
    assert lenient_score(NEGATED_CASES[1], NAMES, SOLUTION) == pytest.approx(2 / 3)
    assert lenient_score(NEGATED_CASES[4], NAMES, SOLUTION) == pytest.approx(2 / 3)  # Ann only under "if"
    prose = "If Ann is a knave, then Bob is a knight. That fails, so Ann is a knight; Bob is a knave."
    assert lenient_score(prose, NAMES, SOLUTION) == pytest.approx(2 / 3)


# Math: ground truth, then completions that must score 0 (item 15), and the same with the right answer.
MATH_WRONG = [
    ("3", "\\boxed{4 = 3}"),
    ("3", "\\boxed{3 \\approx 4}"),
    ("3", "\\boxed{3\\%}"),
    ("0.03", "\\boxed{3\\%}"),
    ("3", "</think>\\boxed{4}<think>\\boxed{3}"),
    ("3", "<think>\\boxed{3}</think>The answer is \\boxed{4}.<think>no, \\boxed{3}"),
]


@pytest.mark.parametrize(("truth", "response"), MATH_WRONG)
def test_math_answers_that_only_look_right_score_zero(truth, response):
    assert math_score(response, truth) == 0.0


def math_cases() -> list[tuple[str, str, str]]:
    """Return (response, ground truth, family) for every generated math completion."""
    rng = random.Random(15)
    families = ["right", "relation", "percent", "reopened_think", "inside_think", "earlier_box", "junk"]
    cases = []
    for i in range(MATH_COMPLETIONS):
        truth = str(rng.randint(-50, 50))
        wrong = str(int(truth) + rng.choice([-2, -1, 1, 2, 10]))
        family = families[i % len(families)]
        relation = rng.choice(["=", "\\approx", "\\equiv", "\\sim", "\\simeq", "≈"])
        if family == "right":
            response = rng.choice(["\\boxed{%s}", "x = \\boxed{%s}", "\\boxed{x = %s}", "\\fbox{%s}"]) % truth
        elif family == "relation":
            forms = [f"{wrong} {relation} {truth}", f"{truth} {relation} {wrong}", f"x = {wrong} = {truth}",
                     f"{wrong} {relation} x = {truth}"]  # fmt: skip
            response = f"\\boxed{{{rng.choice(forms)}}}"
        elif family == "percent":
            response = rng.choice(["\\boxed{%s\\%%}", "\\boxed{%s \\%%}", "\\boxed{%s\\text{ percent}}"]) % truth
        elif family == "reopened_think":
            response = f"<think>hm</think>So \\boxed{{{wrong}}}.<think>Actually \\boxed{{{truth}}}"
        elif family == "inside_think":
            response = f"<think>\\boxed{{{truth}}}</think>" + rng.choice(["", f"\\boxed{{{wrong}}}", "\\boxed{"])
        elif family == "earlier_box":
            response = f"\\boxed{{{truth}}} no, wait: \\boxed{{{wrong}}} \\boxed{{{truth}"
        else:
            pieces = ["\\boxed{", "\\fbox{", "{", "}", "</think>", "<think>", "=", "\\%", truth, wrong, " ", "x"]
            response = "".join(rng.choice(pieces) for _ in range(rng.randrange(40)))
        cases.append((response, truth, family))
    return cases


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # math-verify's timer in a GC callback
def test_every_math_scorer_gives_0_or_1_and_no_credit_to_wrong_families():
    for response, truth, family in math_cases():
        final_text(response), last_boxed(response)  # the parsers themselves must not raise
        answer = extract_answer(response)
        if answer is not None:
            value_to_grade(answer, truth)
        assert format_score(response, truth) in (0.0, 1.0)
        score = math_score(response, truth)
        assert score in (0.0, 1.0)
        if family != "junk":
            assert score == (1.0 if family == "right" else 0.0), (family, truth, response)
