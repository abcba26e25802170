import pytest

from lopti.tasks.completions import prefilled_think
from lopti.tasks.kk.prompts import TEMPLATES, prefill, puzzle_prompt, render_prompt, trainer_prompt
from lopti.tasks.kk.render import render_terse

QUIZ = "You meet 2 inhabitants: Ann and Bob. Ann says that Bob is a knave. Who is a knight and who is a knave?"


def test_chatml_think_is_the_papers_structure():
    [message] = render_prompt(QUIZ, 2, "chatml-think")
    text = message["content"]
    assert text.startswith("<|im_start|>system\n") and "<think> </think>" in text and "<answer> </answer>" in text
    assert f"<|im_start|>user\n{QUIZ}<|im_end|>\n<|im_start|>assistant\n<think>" in text
    assert text.endswith("<think>") and "(1) Name is a knight" in text


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_contains_the_quiz(template):
    messages = render_prompt(QUIZ, 2, template)
    assert QUIZ in "".join(m["content"] for m in messages)
    fed = trainer_prompt(messages, template)
    assert isinstance(fed, str) == (template != "chat")
    assert prefill(template) == ("" if template == "chat" else "<think>")


def test_unknown_template():
    with pytest.raises(ValueError, match="unknown template 'x'; choose one of chatml-think"):
        render_prompt(QUIZ, 2, "x")


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|im_start|>assistant\n<think>", "<think>"),
        ("Solution: <think>  \n", "<think>"),
        ("no prefill here", ""),
        ([{"role": "user", "content": "quiz <think>"}], ""),  # a user turn pre-fills nothing
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>"}], "<think>"),
        ([], ""),
    ],
)
def test_prefilled_think_reads_raw_text_and_continued_assistant_turns(prompt, expected):
    assert prefilled_think(prompt) == expected


def test_terse_puzzle_prompt_shows_the_short_form():
    statements, names = [["lying", 1], ["telling-truth", 0]], ["Ann", "Bob"]
    terse = puzzle_prompt(statements, names, "English quiz", "terse")[0]["content"]
    assert "English quiz" not in terse and terse.startswith(render_terse(statements, names))
    assert "English quiz" in puzzle_prompt(statements, names, "English quiz", "compact")[0]["content"]
