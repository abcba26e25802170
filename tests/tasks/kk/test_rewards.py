import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lopti.tasks.kk.rewards import (
    accuracy,
    compute_score,
    lenient_score,
    logic_rl_score,
    make_reward,
    partial_score,
    strict_score,
)

NAMES = ["Ann", "Bob", "Cy"]
SOLUTION = [True, False, True]
RIGHT = "(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is a knight"


def text(answer, think="<think>Bob lies.</think>"):
    return f"{think}\n<answer>{answer}</answer>"


GOLDEN = [
    # (assistant text, logic_rl, strict, partial, accuracy)
    (text(RIGHT), 3.0, 3.0, 1.0, 1.0),
    (text("(1) Ann is a knight\n(2) Bob is a knight\n(3) Cy is a knight"), -0.5, -0.5, 2 / 3, 0.0),
    (text("Ann is a knight, Bob is a knave"), -1.0, -1.0, 0.0, 0.0),  # a person missing
    (text(""), -1.0, -1.0, 0.0, 0.0),  # empty answer
    ("<think>x</think> (1) Ann is a knight (2) Bob is a knave (3) Cy is a knight", -3.0, -3.0, 0.0, 0.0),
    (text(RIGHT) + "<answer>" + RIGHT + "</answer>", -3.0, -3.0, 0.0, 0.0),  # two answers: bad format
    ("<answer>" + RIGHT + "</answer><think>x</think>", -3.0, -3.0, 0.0, 0.0),  # tags out of order
    ("", -3.0, -3.0, 0.0, 0.0),
    # reward-hacking attempts
    (text(RIGHT + "\n(1) Ann is a knave"), -1.0, -1.0, 0.0, 0.0),  # one name given both roles
    (text(RIGHT + "\n(4) Dee is a knave"), -1.0, -1.0, 0.0, 0.0),  # an extra person
    (
        text("(1) Ann is a knight\n(2) Ann is a knight\n(3) Cy is a knight"),
        -1.0,
        -1.0,
        0.0,  # Bob is never named: no partial credit either
        0.0,
    ),  # duplicated name
    (text("(1) Ann is a knight\n(2) Bob is a knave\n(3) is a knight"), -1.0, -1.0, 0.0, 0.0),  # a name dropped
    (text("see above", think=f"<think>{RIGHT}</think>"), -1.0, -1.0, 0.0, 0.0),  # roles only outside <answer>
    (text("Ann is a knight or a knave, Bob is a knave, Cy is a knight"), -1.0, -1.0, 0.0, 0.0),
]


@pytest.mark.parametrize(("assistant", "logic_rl", "strict", "partial", "acc"), GOLDEN)
def test_golden_values(assistant, logic_rl, strict, partial, acc):
    assert logic_rl_score(assistant, NAMES, SOLUTION) == logic_rl
    assert strict_score(assistant, NAMES, SOLUTION) == strict
    assert partial_score(assistant, NAMES, SOLUTION) == pytest.approx(partial)
    assert accuracy(assistant, NAMES, SOLUTION) == acc


def test_logic_rl_counts_substrings_strict_counts_words():
    # "knights" is one more "knight" substring for the paper's reward, not a role word for strict
    answer = text(RIGHT + "\nAll knights found.")
    assert logic_rl_score(answer, NAMES, SOLUTION) == -1.0
    assert strict_score(answer, NAMES, SOLUTION) == 3.0


def test_strict_tolerates_case_spacing_and_a_second_think():
    sloppy = (
        "<think> <think>Bob lies.</ THINK>\n< answer >(1) ann IS A Knight\n(2) Bob is  a knave\n"
        "(3) Cy is a KNIGHT</Answer>"
    )
    assert strict_score(sloppy, NAMES, SOLUTION) == 3.0
    assert logic_rl_score(sloppy, NAMES, SOLUTION) == -3.0


def test_logic_rl_counts_the_prefilled_think():
    assert logic_rl_score("<think><think>x</think><answer>" + RIGHT + "</answer>", NAMES, SOLUTION) == -3.0


def test_configurable_roles():
    answer = text("(1) Ann is a angel\n(2) Bob is a devil\n(3) Cy is a angel")
    assert strict_score(answer, NAMES, SOLUTION, ("angel", "devil")) == 3.0
    assert logic_rl_score(answer, NAMES, SOLUTION) == -1.0


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/thinkasweroABCnyb()123 \n")), max_size=200) | st.text(max_size=300))
def test_any_string_gives_a_float_and_never_full_credit_unless_exactly_right(junk):
    for scorer in (logic_rl_score, strict_score, partial_score, lenient_score, accuracy):
        value = scorer(junk, NAMES, SOLUTION)
        assert isinstance(value, float)
    assert strict_score(junk, NAMES, SOLUTION) in (3.0, -0.5, -1.0, -3.0)
    assert logic_rl_score(junk, NAMES, SOLUTION) in (3.0, -0.5, -1.0, -3.0)


@pytest.mark.parametrize(
    ("assistant", "expected"),
    [
        (text(RIGHT), 1.0),
        ("So Ann is a knight, Bob is a knave and Cy is a knight.", 1.0),  # prose, no tags
        ("Ann is a knave... no wait: Ann is a knight. Bob is a knave.", 2 / 3),  # the last word counts; Cy missing
        ("<think>Ann is a knave, Bob is a knight</think>Ann is a knight. Cy is a knight.", 2 / 3),  # after </think>
        (text("Ann is a knight") + " Bob is a knight, Cy is a knave", 1 / 3),  # the <answer> block wins
        ("Annie is a knight. Bobby is a knave.", 0.0),  # whole names only
        ("", 0.0),
    ],
)
def test_lenient_reads_prose(assistant, expected):
    assert lenient_score(assistant, NAMES, SOLUTION) == pytest.approx(expected)


def test_never_raises_on_bad_arguments():
    assert lenient_score(None, NAMES, SOLUTION) == 0.0
    assert logic_rl_score(None, NAMES, SOLUTION) == -3.0
    assert strict_score(text(RIGHT), None, SOLUTION) == -3.0
    assert partial_score(text(RIGHT), NAMES, None) == 0.0


def test_trl_wrapper_adds_the_prefill_and_reads_columns():
    reward = make_reward("logic_rl")
    completions = ["Bob lies.</think>\n<answer>" + RIGHT + "</answer>"] * 2
    prompts = ["<|im_start|>assistant\n<think>", "no prefill here"]
    scores = reward(prompts=prompts, completions=completions, names=[NAMES] * 2, solution=[SOLUTION] * 2)
    assert scores == [3.0, -3.0]
    conversational = [[{"role": "assistant", "content": completions[0]}]]
    prompt = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>"}]]
    assert reward(prompts=prompt, completions=conversational, names=[NAMES], solution=[SOLUTION]) == [3.0]
    assert reward.__name__ == "kk_logic_rl"
    with pytest.raises(ValueError, match="unknown K&K reward 'best'"):
        make_reward("best")


def test_verl_hook_reads_both_ground_truth_schemas():
    response = "Bob lies.</think>\n<answer>" + RIGHT + "</answer>"
    ours = {"names": NAMES, "solution": SOLUTION}
    logic_rl = {"solution_text_format": RIGHT, "statements": "..."}
    assert compute_score("kk_logic3", response, ours) == 3.0
    assert compute_score("kk_logic3", response, logic_rl) == 3.0
    assert compute_score("kk_logic3", "<think>" + response, ours, {"prefill": ""}) == 3.0
    assert compute_score("kk_logic3", response, {}) == -3.0


def test_completion_that_did_not_end_on_eos_fails():
    reward = make_reward("strict", eos_token_id=2, pad_token_id=0)
    completion = "x</think><answer>" + RIGHT + "</answer>"
    kwargs = dict(prompts=["<think>"] * 3, completions=[completion] * 3, names=[NAMES] * 3, solution=[SOLUTION] * 3)
    ids = [[5, 6, 2], [5, 6, 7], [5, 0, 0, 2]]  # ended; truncated; padded before ending
    assert reward(**kwargs, completion_ids=ids) == [3.0, -3.0, -3.0]
    assert make_reward("partial", eos_token_id=2)(**kwargs, completion_ids=ids)[1] == 0.0


def logic_rl_reference(text: str, names: list[str], solution: list[bool]) -> float:
    """Logic-RL's compute_score restated from its definition (docs/paper.md §6), the yardstick for `logic_rl`."""
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    positions = [text.find(tag) for tag in tags]
    format_ok = all(text.count(tag) == 1 for tag in tags) and positions == sorted(positions)
    blocks = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    answer = blocks[-1].strip() if blocks else ""
    if not (format_ok and answer):
        return (1.0 if format_ok else -1.0) - 2.0
    lowered = answer.lower()
    if lowered.count("knight") + lowered.count("knave") != len(names):
        return 1.0 - 2.0
    predicted = {}
    for name in names:
        found = re.search(rf"\b{re.escape(name)}\b\s+is\s+a\s+\b(knight|knave)\b", answer, re.IGNORECASE)
        if not found:
            return 1.0 - 2.0
        predicted[name] = found.group(1).lower()
    truth = {name: "knight" if truthful else "knave" for name, truthful in zip(names, solution, strict=True)}
    return 1.0 + (2.0 if predicted == truth else -1.5)


ROLE_WORDS = ["knight", "knave", "KNIGHT", "Knave", "knights", "knıght", "\u212anight", "\u212anave", "knİght"]
PIECES = ["Ann", "Bob", "Cy", " is a ", " is  a\n", *ROLE_WORDS, "(1) ", "\n", " ", ",", "not ", "If ", "false that "]
pieces = st.lists(st.sampled_from(PIECES), max_size=25).map("".join)


def answer_line(name: str) -> st.SearchStrategy[str]:
    return st.builds(
        "{}{} is a {}{}".format,
        st.sampled_from(["", "", "(1) ", "It is false that ", "If "]),
        st.just(name),
        st.sampled_from(["knight", "knave"] * 4 + ROLE_WORDS),
        st.sampled_from(["", "", ".", " then", " knight"]),
    )


answer_texts = st.builds(
    lambda think, lines, tail: f"<think>{think}</think><answer>{chr(10).join(lines)}</answer>{tail}",
    pieces,
    st.permutations(NAMES).flatmap(lambda order: st.tuples(*map(answer_line, order))),
    st.sampled_from(["", "", "</answer>", "<think>", " done"]),
)


@settings(max_examples=600, deadline=None)
@given(answer_texts | pieces)
def test_logic_rl_is_logic_rls_reward_except_that_look_alike_role_words_never_earn_credit(text):
    ours, theirs = logic_rl_score(text, NAMES, SOLUTION), logic_rl_reference(text, NAMES, SOLUTION)
    if text.isascii():
        assert ours == theirs
    else:  # Logic-RL lower-cases "Knight" (Kelvin sign) to "knight"; lopti reads no role into it
        assert ours == theirs or (theirs == 3.0 and ours == -0.5 and "\u212a" in text)


def test_logic_rl_reference_agrees_on_the_golden_cases():
    for assistant, logic_rl, *_ in GOLDEN:
        assert logic_rl_reference(assistant, NAMES, SOLUTION) == logic_rl


def test_strict_reads_plain_answer_forms():
    for answer in (
        "(1) Ann is a knight (2) Bob is a knave (3) Cy is a knight",  # one line
        "Ann is a knight, Bob is a knave and Cy is a knight.",
        "1. Ann is a knight\n2. Bob is a knave\n3. Cy is a knight",
        "- Ann is a knight\n- Bob is a knave\n- Cy is a knight\nThat is all.",
        "Final answer:\n(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is a knight\nSo Ann and Cy are knights.",
    ):
        assert strict_score(text(answer), NAMES, SOLUTION) == 3.0, answer


@pytest.mark.parametrize(
    "answer",
    [
        "(1) Ann is a knight\n(2) It is false that Bob is a knight\n(3) Cy is a knight",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) If Cy is a knight then Ann is a knight",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is a knight, unless Bob is a knight",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is a knight\nThis isn't certain.",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is probably a knight",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) Cy is a knight?",
        "(1) Ann is a knight\n(2) Bob is a knave\n(3) ~Cy is a knight",
    ],
)
def test_strict_reads_no_negated_conditional_or_hedged_answer(answer):
    assert strict_score(text(answer), NAMES, SOLUTION) == -1.0
    assert partial_score(text(answer), NAMES, SOLUTION) == 0.0


# Look-alikes of the role word Bob does not get: Kelvin sign, Cyrillic, Greek, dotless i, dotted capital I,
# fullwidth, small capitals, mathematical bold, a combining dot, a zero-width space, a soft hyphen, accents.
CONFUSABLE_ROLES = [
    "\u212anight", "\u212aNIGHT", "kn\u0456ght", "KN\u0406GHT", "kn\u0131ght", "KN\u0130GHT", "ｋｎｉｇｈｔ",
    "ᴋɴɪɢʜᴛ", "𝐤𝐧𝐢𝐠𝐡𝐭", "kni\u0307ght", "kn\u200bight", "kn\u00adight", "knιght", "knîght",
    "\u212anave", "kn\u0430ve", "knav\u0435", "kn\u03b1ve", "kna\u03bde", "ｋｎａｖｅ", "kn\u200bave",
]  # fmt: skip


@pytest.mark.parametrize("word", CONFUSABLE_ROLES)
@pytest.mark.parametrize("where", ["after", "before", "same line"])
def test_a_look_alike_second_role_for_one_person_earns_nothing_from_the_strict_scorers(word, where):
    from lopti.tasks.registry import TASKS

    extra = f"(2) Bob is a {word}"
    answer = {
        "after": f"{RIGHT}\n{extra}",
        "before": f"{extra}\n{RIGHT}",
        "same line": RIGHT.replace("\n(3)", f" {extra} (3)"),
    }[where]
    assistant = text(answer)
    assert strict_score(assistant, NAMES, SOLUTION) == -1.0  # unparseable, as with two ASCII roles
    assert partial_score(assistant, NAMES, SOLUTION) == 0.0
    assert accuracy(assistant, NAMES, SOLUTION) == 0.0
    assert TASKS["kk"].judge(assistant, {"names": NAMES, "solution": SOLUTION}) == (False, True)
    if where == "after":  # lenient takes each person's last statement: a look-alike one names no role
        assert lenient_score(assistant, NAMES, SOLUTION) == pytest.approx(2 / 3)


def test_non_ascii_prose_and_names_keep_a_right_answer_right():
    names = ["Zoë", "Bob", "Cy"]
    answer = "(1) Zoë is a knight\n(2) Bob is a knave\n(3) Cy is a knight\nРыцарь — это правда; “so” it is."
    assert strict_score(text(answer), names, SOLUTION) == 3.0
    assert accuracy(text(answer), names, SOLUTION) == 1.0
