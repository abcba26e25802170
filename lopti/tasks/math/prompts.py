"""Math prompt templates: the raw-text form the paper trained with, the tokenizer's chat template, and the chat
template after one worked example.

All ask for step-by-step reasoning and a final answer in \\boxed{}, the DeepScaleR/verl instruction.
`raw` is fed to the model verbatim (no chat template, as in the paper's raw-text runs); `chat` is one
user turn that the trainer renders with the tokenizer's own chat template; `chat-example` puts one solved
problem (a user turn and the assistant's answer, ending in \\boxed{}) before that turn, for a small model that
does not write the box from the instruction alone (SmolLM2-135M-Instruct: docs/guides/math.md).
"""

from __future__ import annotations

TEMPLATES = ("raw", "chat", "chat-example")
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
# the worked example of `chat-example`: a one-step story in the generator's level-1 style, with a name and a noun
# the generator never uses, so the example is no generated problem
EXAMPLE_PROBLEM = "Rosa has 17 pens and gets 8 more. How many pens does Rosa have now?"
EXAMPLE_ANSWER = "Rosa starts with 17 pens and gets 8 more, so she has 17 + 8 = 25 pens.\n\n\\boxed{25}"


def render_prompt(problem: str, template: str = "chat") -> list[dict]:
    """Return the prompt for `problem` as chat messages, ending in the user turn that asks it."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown math template {template!r}; choose one of {', '.join(TEMPLATES)}")
    question = [{"role": "user", "content": f"{problem} {INSTRUCTION}"}]
    if template == "chat-example":
        example = [
            {"role": "user", "content": f"{EXAMPLE_PROBLEM} {INSTRUCTION}"},
            {"role": "assistant", "content": EXAMPLE_ANSWER},
        ]
        return example + question
    return question


def trainer_prompt(messages: list[dict], template: str) -> str | list[dict]:
    """Return what a trainer should feed the model: the raw text verbatim, or the messages."""
    return messages[-1]["content"] + "\n" if template == "raw" else messages
