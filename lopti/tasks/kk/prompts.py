"""Prompt templates for K&K (docs/paper.md §6): how a quiz is put to a model.

Each template returns chat messages. Raw-text templates (`chatml-think`, `plain-think`, `compact`,
`terse`) render the whole prompt themselves and return it as a single user message, the Logic-RL/verl
convention; the trainer feeds that text to the model verbatim. `terse` shows the short puzzle form of
`render.render_terse` with no instruction, for tiny models on a CPU (about half the tokens of
`compact`). `chat` returns system + user turns for the tokenizer's own chat template.
"""

from __future__ import annotations

from lopti.tasks.kk.logic import Statement
from lopti.tasks.kk.render import DEFAULT_ROLES, Roles, render_terse

TEMPLATES = ("chatml-think", "plain-think", "compact", "terse", "chat")
RAW_TEMPLATES = ("chatml-think", "plain-think", "compact", "terse")
THINK_PREFILL = "<think>"


def instruction(people: int, roles: Roles = DEFAULT_ROLES) -> str:
    """Return the task instruction: reason in <think>, answer in <answer> with one line per person."""
    example = "\n".join(f"({k}) Name is a {roles[0] if k % 2 else roles[1]}" for k in range(1, min(people, 2) + 1))
    return (
        "Solve the logic puzzle. First reason step by step inside <think> </think>. Then give the final "
        f"answer inside <answer> </answer>, one line per person in the puzzle's order, like:\n{example}"
    )


def render_prompt(quiz: str, people: int, template: str = "chatml-think", roles: Roles = DEFAULT_ROLES) -> list[dict]:
    """Return the prompt for `quiz` as chat messages (see the module docstring)."""
    if template == "chatml-think":
        text = (
            f"<|im_start|>system\nYou are a helpful assistant. {instruction(people, roles)}<|im_end|>\n"
            f"<|im_start|>user\n{quiz}<|im_end|>\n<|im_start|>assistant\n{THINK_PREFILL}"
        )
    elif template == "plain-think":
        text = f"{instruction(people, roles)}\n\nPuzzle: {quiz}\n\nSolution: {THINK_PREFILL}"
    elif template == "compact":
        text = f"{quiz}\nAnswer in <answer> </answer>, one line per person.\n{THINK_PREFILL}"
    elif template == "terse":  # `quiz` is the short form (`puzzle_prompt` passes it)
        text = f"{quiz}\n{THINK_PREFILL}"
    elif template == "chat":
        return [{"role": "system", "content": instruction(people, roles)}, {"role": "user", "content": quiz}]
    else:
        raise ValueError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    return [{"role": "user", "content": text}]


def puzzle_prompt(
    statements: list[Statement],
    names: list[str],
    quiz: str,
    template: str = "chatml-think",
    roles: Roles = DEFAULT_ROLES,
) -> list[dict]:
    """Return the prompt of one puzzle: its English `quiz`, or for `terse` the short form of `render_terse`."""
    shown = render_terse(statements, names, roles) if template == "terse" else quiz
    return render_prompt(shown, len(names), template, roles)


def trainer_prompt(messages: list[dict], template: str) -> str | list[dict]:
    """Return what a trainer should feed the model: a raw template's text verbatim, else the messages."""
    return messages[0]["content"] if template in RAW_TEMPLATES else messages


def prefill(template: str) -> str:
    """Return the text a template puts at the start of the assistant turn (counted by the reward)."""
    return THINK_PREFILL if template in RAW_TEMPLATES else ""
