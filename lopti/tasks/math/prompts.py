"""Math prompt templates: the raw-text form the paper trained with, and the tokenizer's chat template.

Both ask for step-by-step reasoning and a final answer in \\boxed{}, the DeepScaleR/verl instruction.
`raw` is fed to the model verbatim (no chat template, as in the paper's raw-text runs); `chat` is one
user turn that the trainer renders with the tokenizer's own chat template.
"""

from __future__ import annotations

TEMPLATES = ("raw", "chat")
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def render_prompt(problem: str, template: str = "chat") -> list[dict]:
    """Return the prompt for `problem` as chat messages (a single user turn)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown math template {template!r}; choose one of {', '.join(TEMPLATES)}")
    return [{"role": "user", "content": f"{problem} {INSTRUCTION}"}]


def trainer_prompt(messages: list[dict], template: str) -> str | list[dict]:
    """Return what a trainer should feed the model: the raw text verbatim, or the messages."""
    return messages[0]["content"] + "\n" if template == "raw" else messages
