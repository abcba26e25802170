"""K&K rewards (PAPER.md §6). Each scorer maps one assistant text to a float and never raises.

The assistant text is the prefilled part of the assistant turn (the paper's "<think>") plus the
completion. `logic_rl` reproduces the paper's reward exactly; `strict` keeps its values but counts role
words as whole words, requires each name exactly once, tolerates case and spacing in tags, and forgives
a model that writes its own "<think>"; `partial` gives the share of correctly named roles; `accuracy`
is 1 iff the strictly parsed answer is exactly right. `make_reward` wraps a scorer for TRL's
`reward_funcs`; `compute_score` is verl's custom-reward hook.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lopti.tasks.completions import completion_text, ended_properly
from lopti.tasks.kk.prompts import THINK_PREFILL
from lopti.tasks.kk.render import DEFAULT_ROLES, Roles

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
FORMAT_OK, FORMAT_BAD = 1.0, -1.0
CORRECT, WRONG, UNPARSEABLE = 2.0, -1.5, -2.0
WORST = FORMAT_BAD + UNPARSEABLE
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
LOOSE_TAG_RE = re.compile(r"<\s*(/?)\s*(think|answer)\s*>", re.IGNORECASE)

Parsed = list[bool] | None  # True = truthful role, per name in puzzle order; None = unparseable


def _answer_block(text: str) -> str | None:
    """Return the last <answer> block when the four tags appear once each and in order, else None."""
    positions = []
    for tag in TAGS:
        if text.count(tag) != 1:
            return None
        positions.append(text.find(tag))
    if positions != sorted(positions):
        return None
    return ANSWER_RE.findall(text)[-1].strip()


def _roles_given(name: str, answer: str, roles: Roles) -> list[bool]:
    """Return every role given to `name` by "Name is a <role>" (True = truthful)."""
    pattern = rf"\b{re.escape(name)}\b\s+is\s+a\s+\b({re.escape(roles[0])}|{re.escape(roles[1])})\b"
    return [m.lower() == roles[0].lower() for m in re.findall(pattern, answer, flags=re.IGNORECASE)]


def _role_word_count(answer: str, roles: Roles) -> int:
    return len(re.findall(rf"\b(?:{re.escape(roles[0])}|{re.escape(roles[1])})\b", answer, flags=re.IGNORECASE))


def _score(answer: str | None, parsed: Parsed, solution: list[bool]) -> float:
    if answer is None:
        return FORMAT_BAD + UNPARSEABLE
    if parsed is None:
        return FORMAT_OK + UNPARSEABLE
    return FORMAT_OK + (CORRECT if parsed == list(solution) else WRONG)


def _logic_rl_parse(answer: str, names: list[str], roles: Roles) -> Parsed:
    lowered = answer.lower()
    if lowered.count(roles[0].lower()) + lowered.count(roles[1].lower()) != len(names):
        return None  # the paper counts substrings, so "knights" counts too
    parsed = []
    for name in names:
        found = _roles_given(name, answer, roles)
        if not found:
            return None
        parsed.append(found[0])  # the paper's parser takes the first match
    return parsed


def logic_rl_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the paper's reward: 3 (right), −0.5 (wrong), −1 (unparseable), −3 (bad format)."""
    try:
        answer = _answer_block(text)
        return _score(answer, _logic_rl_parse(answer, names, roles) if answer else None, solution)
    except Exception:  # a reward must never stop training
        return WORST


def strict_answer(text: str) -> str | None:
    """Return the answer block after normalising tag spelling and a doubled opening <think>."""
    text = LOOSE_TAG_RE.sub(lambda m: f"<{m.group(1)}{m.group(2).lower()}>", text)
    text = re.sub(r"^<think>\s*<think>", "<think>", text.lstrip())
    return _answer_block(text)


def strict_parse(answer: str, names: list[str], roles: Roles = DEFAULT_ROLES) -> Parsed:
    """Return the roles per name when every name gets exactly one role and nothing else has one."""
    if _role_word_count(answer, roles) != len(names):
        return None
    parsed = []
    for name in names:
        found = _roles_given(name, answer, roles)
        if len(found) != 1:
            return None
        parsed.append(found[0])
    return parsed


def strict_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the paper's values (3, −0.5, −1, −3) under the strict parser."""
    try:
        answer = strict_answer(text)
        return _score(answer, strict_parse(answer, names, roles) if answer else None, solution)
    except Exception:
        return WORST


def partial_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the share of people given exactly their right role, when the format is right and every person
    is named with one role (else 0: an answer that drops a name must not keep the other roles' credit)."""
    try:
        answer = strict_answer(text)
        if not answer or _role_word_count(answer, roles) != len(names):
            return 0.0
        given = [_roles_given(n, answer, roles) for n in names]
        if any(len(g) != 1 for g in given):
            return 0.0
        return sum(g == [k] for g, k in zip(given, solution, strict=True)) / len(names)
    except Exception:
        return 0.0


def lenient_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the share of people whose last stated role is right, ignoring the answer format.

    For models that answer in prose (an instruct model that never writes the tags): the text after the
    last "</think>" (or all of it) is read, the last <answer> block if there is one, and for each name the
    last "Name is a <role>" counts; a name never given a role counts as wrong.
    """
    try:
        graded = text.rsplit("</think>", 1)[-1]
        blocks = ANSWER_RE.findall(graded)
        graded = blocks[-1] if blocks else graded
        right = 0
        for name, truthful in zip(names, solution, strict=True):
            given = _roles_given(name, graded, roles)
            right += bool(given) and given[-1] == truthful
        return right / len(names)
    except Exception:
        return 0.0


def accuracy(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return 1.0 iff the strictly parsed roles equal the solution, else 0.0."""
    return float(strict_score(text, names, solution, roles) == FORMAT_OK + CORRECT)


SCORERS: dict[str, Callable[..., float]] = {
    "logic_rl": logic_rl_score,
    "strict": strict_score,
    "partial": partial_score,
    "lenient": lenient_score,
    "accuracy": accuracy,
}


def _prefill_of(prompt: Any) -> str:
    """Return the "<think>" that the prompt pre-filled in the assistant turn, or ""."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content", "") if prompt[-1].get("role") == "assistant" else ""
    return THINK_PREFILL if isinstance(prompt, str) and prompt.rstrip().endswith(THINK_PREFILL) else ""


def make_reward(
    name: str, eos_token_id: int | None = None, pad_token_id: int | None = None
) -> Callable[..., list[float]]:
    """Return a reward function with TRL's `reward_funcs` signature for scorer `name`.

    It reads the dataset columns `names` and `solution` (and `roles` if present), and puts the prompt's
    pre-filled "<think>" back in front of each completion before scoring. With `eos_token_id`, a
    completion that did not end on it (truncated, or padded) scores as a format failure.
    """
    if name not in SCORERS:
        raise ValueError(f"unknown K&K reward {name!r}; choose one of {', '.join(SCORERS)}")
    scorer = SCORERS[name]
    failure = scorer("", [""], [True])

    def reward(prompts: list, completions: list, names: list, solution: list, **kwargs: Any) -> list[float]:
        roles = kwargs.get("roles") or [DEFAULT_ROLES] * len(completions)
        ids = kwargs.get("completion_ids") or [None] * len(completions)
        return [
            failure
            if eos_token_id is not None and i is not None and not ended_properly(i, eos_token_id, pad_token_id)
            else scorer(_prefill_of(p) + completion_text(c), n, s, tuple(r))
            for p, c, n, s, r, i in zip(prompts, completions, names, solution, roles, ids, strict=True)
        ]

    reward.__name__ = f"kk_{name}"
    return reward


def _ground_truth_roles(ground_truth: dict) -> tuple[list[str], list[bool]]:
    if "names" in ground_truth and "solution" in ground_truth:
        return list(ground_truth["names"]), [bool(x) for x in ground_truth["solution"]]
    lines = re.findall(r"\(\d+\)\s*(.+?)\s+is\s+a\s+(knight|knave)", ground_truth["solution_text_format"])
    return [name for name, _ in lines], [role == "knight" for _, role in lines]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: dict,
    extra_info: dict | None = None,
    reward: str = "logic_rl",
) -> float:
    """verl's custom reward hook: score a decoded response against a K&K ground truth.

    `ground_truth` is lopti's ({"names", "solution"}) or Logic-RL's ({"solution_text_format"}). The
    pre-filled "<think>" comes from `extra_info["prefill"]`, "<think>" by default as in the paper.
    """
    try:
        names, solution = _ground_truth_roles(ground_truth)
        prefill = (extra_info or {}).get("prefill", THINK_PREFILL)
        return SCORERS[reward](prefill + solution_str, names, solution)
    except Exception:
        return WORST
