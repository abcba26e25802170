"""Math rewards (docs/paper.md §8): the last \\boxed{...} answer, graded by math-verify, 1.0 or 0.0.

Grading follows the DeepScaleR/verl convention the paper trained with, made safe against answers that
only look right (docs/guides/math.md): the graded text is the response's `final_text` (after the last
"</think>", and not inside a "<think>" reopened after it); its last complete \\boxed{...} (or \\fbox{...})
is the answer; math-verify decides whether it equals the ground truth (1/2, 0.5 and \\frac{1}{2} are
the same answer). Against a plain value, an answer that states a relation ("4 = 3", "3 \\approx 4") or a
percentage ("3\\%") earns nothing; "x = 3" is graded as 3. `format_score` is the format-only variant:
1.0 for a non-empty boxed answer.

Scorers never raise, and take time linear in the response's length up to math-verify, whose every call
is bounded in time from any thread (`lopti.tasks.math.verify`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lopti.tasks.completions import completion_text, ended_properly, final_text
from lopti.tasks.math.verify import DEFAULT_TIMEOUT_S, equivalent

MAX_ANSWER_CHARS = 1000  # longer "answers" are not answers, and math-verify need not spend its time on them
BOX_RE = re.compile(r"\\(?:boxed|fbox) *\{")
BRACE_RE = re.compile(r"[{}]")
# A relation makes "4 = 3" or "3 \approx 4" a statement, not a value; math-verify would grade its right side.
RELATION_RE = re.compile(
    r"[=<>≈≠≤≥≡∼≅]|\\(?:approx|equiv|simeq|sim|cong|neq|ne|leqslant|leq|le|geqslant|geq|ge|lt|gt|propto|doteq)"
    r"(?![A-Za-z])"
)
PERCENT_RE = re.compile(r"%|percent", re.IGNORECASE)
GREEK = "alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|rho|sigma|tau|phi|varphi|chi|psi|omega"  # noqa: E501
# The left side of an answer "x = 3": a variable's name (\pi is a number, not a name)
VARIABLE_RE = re.compile(rf"\s*(?:[A-Za-z]{{1,2}}|\\(?:{GREEK}|{GREEK.title()}))(?:_\{{?\w+\}}?)?'*\s*")


def last_boxed(text: str) -> str | None:
    """Return the contents of the last complete \\boxed{...} or \\fbox{...} in `text`, or None.

    One pass pairs every brace (an unmatched "{" never closes), so the time is linear however many
    unclosed boxes a response holds.
    """
    closing: dict[int, int] = {}
    open_braces: list[int] = []
    for brace in BRACE_RE.finditer(text):
        if brace.group() == "{":
            open_braces.append(brace.start())
        elif open_braces:
            closing[open_braces.pop()] = brace.start()
    for box in reversed(list(BOX_RE.finditer(text))):
        opening = box.end() - 1
        if opening in closing:
            return text[opening + 1 : closing[opening]].strip()
    return None


def extract_answer(response: str) -> str | None:
    """Return the graded answer of a response (see the module docstring), or None if it has none."""
    answer = last_boxed(final_text(response))
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def value_to_grade(answer: str, ground_truth: str) -> str | None:
    """Return the part of `answer` to compare with `ground_truth`, or None if it cannot earn credit.

    A ground truth that is itself a relation ("y = 2x + 1", "x > 2") is compared whole. Against a plain
    value, "x = 3" is graded as 3, while any other relation ("4 = 3", "3 \\approx 4", "x = 4 = 3") and a
    percentage the ground truth does not have ("3\\%" for 3 or for 0.03) are no answer at all.
    """
    if RELATION_RE.search(ground_truth):
        return answer
    if PERCENT_RE.search(answer) and not PERCENT_RE.search(ground_truth):
        return None
    relations = RELATION_RE.findall(answer)
    if not relations:
        return answer
    if relations != ["="]:
        return None
    variable, value = answer.split("=")
    return value if VARIABLE_RE.fullmatch(variable) else None


def same_answer(answer: str, ground_truth: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """Return True iff `answer` is worth credit against `ground_truth` (LaTeX or plain text, maybe boxed)."""
    gold = last_boxed(ground_truth) or ground_truth
    value = value_to_grade(answer, gold)
    return value is not None and equivalent(value, gold, timeout_s)


def math_score(response: str, ground_truth: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> float:
    """Return 1.0 if the response's graded boxed answer equals `ground_truth`, else 0.0; never raises."""
    try:
        answer = extract_answer(response)
        return float(answer is not None and same_answer(answer, str(ground_truth), timeout_s))
    except Exception:  # math-verify and sympy can fail in many ways on model output; a failure scores 0
        return 0.0


def format_score(response: str, ground_truth: str | None = None) -> float:
    """Return 1.0 if the response has a non-empty graded boxed answer, else 0.0 (the answer is not checked)."""
    try:
        return float(extract_answer(response) is not None)
    except Exception:  # a reward must never stop training
        return 0.0


SCORERS: dict[str, Callable[..., float]] = {"math": math_score, "math_format": format_score}


def make_math_reward(
    name: str, eos_token_id: int | None = None, pad_token_id: int | None = None
) -> Callable[..., list[float]]:
    """Return a reward function with TRL's `reward_funcs` signature, reading the dataset column `answer`.

    With `eos_token_id`, a completion that did not end on it (truncated or padded) scores 0.
    """
    if name not in SCORERS:
        raise ValueError(f"unknown math reward {name!r}; choose one of {', '.join(SCORERS)}")
    scorer = SCORERS[name]

    def reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
        ids = kwargs.get("completion_ids") or [None] * len(completions)
        return [
            0.0
            if eos_token_id is not None and i is not None and not ended_properly(i, eos_token_id, pad_token_id)
            else scorer(completion_text(c), a)
            for c, a, i in zip(completions, answer, ids, strict=True)
        ]

    reward.__name__ = name
    return reward


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """verl's custom reward hook: 1.0 if the decoded response's boxed answer equals the ground truth."""
    return math_score(solution_str, ground_truth)
