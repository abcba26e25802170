"""What every task's reward needs to know about a TRL completion: its text, and whether it ended."""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """Return the text of a TRL completion: a string, or a list of messages (conversational)."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


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
