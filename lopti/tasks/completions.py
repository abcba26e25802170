"""What every task's reward needs to know about a TRL completion: its text, what is graded, whether it ended."""

from __future__ import annotations

from typing import Any

THINK_START, THINK_END = "<think>", "</think>"


def completion_text(completion: Any) -> str:
    """Return the text of a TRL completion: a string, or a list of messages (conversational)."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def final_text(response: str) -> str:
    """Return the part of a response that is its final answer, not its reasoning.

    Without "</think>" that is the whole response (the DeepScaleR/verl convention). Otherwise it is the
    text after the last "</think>", cut at a "<think>" that follows it: a model that reopens its reasoning
    must not have a conclusion inside the new, never-closed block graded. Linear in the response's length.
    """
    end = response.rfind(THINK_END)
    if end < 0:
        return response
    start = end + len(THINK_END)
    reopened = response.find(THINK_START, start)
    return response[start:] if reopened < 0 else response[start:reopened]


def ended_properly(ids: list[int], eos_token_id: int, pad_token_id: int | None) -> bool:
    """Return True iff the completion stopped on its end-of-sequence token and never wrote padding.

    TRL decodes completions without special tokens, so a model that pads or runs out of tokens instead
    of ending looks fine as text; only the ids tell.
    """
    return (
        bool(ids)
        and ids[-1] == eos_token_id
        and (pad_token_id is None or pad_token_id == eos_token_id or pad_token_id not in ids)
    )


def prefilled_think(prompt: Any) -> str:
    """Return the "<think>" that a prompt pre-filled at the start of the assistant turn, or "".

    `prompt` is a raw prompt's text, or chat messages whose last, assistant message is continued. A reward
    or a judge puts it back in front of the completion, since the model never wrote it.
    """
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content", "") if prompt[-1].get("role") == "assistant" else ""
    return THINK_START if isinstance(prompt, str) and prompt.rstrip().endswith(THINK_START) else ""
