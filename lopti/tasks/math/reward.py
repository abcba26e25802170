"""Math rewards (PAPER.md §8): the last \\boxed{...} answer, graded by math-verify, 1.0 or 0.0.

Grading follows the DeepScaleR/verl convention the paper trained with: when the response contains
"</think>", only the text after the last "</think>" counts; the last \\boxed{...} (or \\fbox{...}) of that
text is the answer; math-verify decides whether it equals the ground truth (1/2, 0.5 and \\frac{1}{2} are
the same answer). `format_score` is the format-only variant: 1.0 for a non-empty boxed answer.

Scorers never raise. math-verify bounds parsing and comparison with a SIGALRM timer, which only works
in a process's main thread; elsewhere (a reward worker thread) that timer is off and the work is bounded
by `MAX_ANSWER_CHARS` instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lopti.tasks.completions import completion_text, ended_properly

BOX_COMMANDS = ("\\boxed", "\\fbox")
THINK_END = "</think>"
MAX_ANSWER_CHARS = 1000  # longer "answers" are not answers; it also bounds the work when no timer can run
DEFAULT_TIMEOUT_S = 1  # seconds per parse or comparison; a sane answer takes milliseconds


def graded_text(response: str) -> str:
    """Return the part of a response that is graded: after the last "</think>" if there is one."""
    cut = response.rfind(THINK_END)
    return response if cut < 0 else response[cut + len(THINK_END) :]


def _braced(text: str, start: int) -> str | None:
    """Return the contents of the brace group opening at text[start], or None if it never closes."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : index]
    return None


def last_boxed(text: str) -> str | None:
    """Return the contents of the last complete \\boxed{...} or \\fbox{...} in `text`, or None."""
    end = len(text)
    while True:
        start = max(text.rfind(command, 0, end) for command in BOX_COMMANDS)
        if start < 0:
            return None
        brace = start + len("\\boxed" if text.startswith("\\boxed", start) else "\\fbox")
        while brace < len(text) and text[brace] == " ":
            brace += 1
        if brace < len(text) and text[brace] == "{":
            contents = _braced(text, brace)
            if contents is not None:
                return contents.strip()
        end = start  # an unclosed or brace-less box: look further back


def extract_answer(response: str) -> str | None:
    """Return the graded answer of a response (see the module docstring), or None if it has none."""
    answer = last_boxed(graded_text(response))
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def _timeout() -> int | None:
    return DEFAULT_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def same_answer(answer: str, ground_truth: str, timeout_s: int | None = None) -> bool:
    """Return True iff math-verify finds `answer` equal to `ground_truth` (both LaTeX or plain text)."""
    from math_verify import LatexExtractionConfig, parse, verify

    timeout = _timeout() if timeout_s is None else timeout_s
    gold_text = last_boxed(ground_truth) or ground_truth
    gold = parse(f"${gold_text}$", parsing_timeout=timeout)
    predicted = parse(f"\\boxed{{{answer}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=timeout)
    if not gold or not predicted:
        return False
    return bool(verify(gold, predicted, timeout_seconds=timeout))


def math_score(response: str, ground_truth: str, timeout_s: int | None = None) -> float:
    """Return 1.0 if the response's graded boxed answer equals `ground_truth`, else 0.0; never raises."""
    try:
        answer = extract_answer(response)
        return float(answer is not None and same_answer(answer, str(ground_truth), timeout_s))
    except Exception:  # math-verify and sympy can fail in many ways on model output; a failure scores 0
        return 0.0


def format_score(response: str, ground_truth: str | None = None) -> float:
    """Return 1.0 if the response has a non-empty graded boxed answer, else 0.0 (the answer is not checked)."""
    return float(extract_answer(response) is not None)


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
