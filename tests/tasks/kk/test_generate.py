import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lopti.tasks.kk.generate import KINDS, generate_puzzles, generate_splits, is_test_form, sample_statement
from lopti.tasks.kk.logic import ATOMS, solve
from lopti.tasks.kk.render import NAMES, SAYINGS, pick_names, render_quiz, render_solution


def operators(statement):
    yield statement
    if statement[0] not in ATOMS:
        for operand in statement[1:]:
            yield from operators(operand)


@settings(max_examples=40, deadline=None)
@given(people=st.integers(2, 8), seed=st.integers(0, 10**6))
def test_every_puzzle_has_exactly_its_solution_and_names_everyone(people, seed):
    rng = random.Random(seed)
    for puzzle in generate_puzzles(3, people, seed):
        assert solve(puzzle.statements) == [puzzle.solution]
        names = pick_names(rng, people)
        quiz = render_quiz(puzzle.statements, names, rng)
        assert all(re.search(rf"\b{name}\b", quiz) for name in names)
        assert f"{people} " in quiz


@settings(max_examples=30, deadline=None)
@given(people=st.integers(2, 12), seed=st.integers(0, 10**6))
def test_statement_rules(people, seed):
    rng = random.Random(seed)
    for speaker in range(people):
        statement = sample_statement(rng, speaker, people, depth=2, width=2)
        for node in operators(statement):
            if node[0] in ATOMS:
                assert node != ["lying", speaker], "nobody says 'I am a knave'"
            else:
                operands = node[1:]
                assert len(operands) == (1 if node[0] == "not" else 2)
                assert all(op[0] in ATOMS for op in operands), "depth 2: operators take atoms"
                assert len({str(op) for op in operands}) == len(operands), "operands are distinct"


def test_six_kinds_equally_likely():
    rng = random.Random(0)
    counts = dict.fromkeys(KINDS, 0)
    for _ in range(12_000):
        statement = sample_statement(rng, 0, 5, depth=2, width=2)
        counts["atom" if statement[0] in ATOMS else statement[0]] += 1
    assert all(abs(count / 12_000 - 1 / 6) < 0.015 for count in counts.values()), counts


def test_deterministic_and_seed_dependent():
    assert generate_puzzles(20, 5, seed=7) == generate_puzzles(20, 5, seed=7)
    assert generate_puzzles(20, 5, seed=7) != generate_puzzles(20, 5, seed=8)


def test_splits_never_share_a_canonical_form_and_test_is_stable():
    train, test = generate_splits(3, 300, 100, seed=1)
    assert len(train) == 300 and len(test) == 100
    assert all(is_test_form(p.key) for p in test) and not any(is_test_form(p.key) for p in train)
    assert len({p.key for p in train + test}) == 400
    _, test_again = generate_splits(3, 50, 100, seed=1)
    assert test_again == test
    # training data from any other seed never holds a test puzzle of this one
    other_train, _ = generate_splits(3, 2000, 0, seed="sft")
    assert not {p.key for p in other_train} & {p.key for p in test}


def test_test_forms_are_about_a_fifth():
    keys = [p.key for p in generate_puzzles(3000, 4, seed=3)]
    assert 0.17 < sum(map(is_test_form, keys)) / len(keys) < 0.23


def test_width_and_depth_are_configurable():
    puzzles = generate_puzzles(30, 6, seed=0, depth=3, width=3)
    nodes = [node for p in puzzles for s in p.statements for node in operators(s)]
    assert any(node[0] in ("and", "or") and len(node) == 4 for node in nodes)
    assert any(node[0] not in ATOMS and any(op[0] not in ATOMS for op in node[1:]) for node in nodes)
    assert all(solve(p.statements) == [p.solution] for p in puzzles)


def test_render_text_pieces():
    assert len(NAMES) >= 50 and len(set(NAMES)) == len(NAMES)
    assert len(SAYINGS) >= 10
    rng = random.Random(0)
    quiz = render_quiz([["lying", 1], ["telling-truth", 0]], ["Ann", "Bob"], rng, ("angel", "devil"))
    assert "Bob is a devil" in quiz and "Ann is a angel" in quiz and "knight" not in quiz
    assert render_solution(["Ann", "Bob"], [True, False]) == "(1) Ann is a knight\n(2) Bob is a knave"


@pytest.mark.parametrize(("people", "message"), [(1, "from 2 to 12, got 1"), (13, "from 2 to 12, got 13")])
def test_people_limits(people, message):
    with pytest.raises(ValueError, match=message):
        generate_puzzles(1, people)


def test_too_many_puzzles_says_how_many_were_found():
    with pytest.raises(ValueError, match=r"found only \d+ of 1000 unique 2-person puzzles"):
        generate_puzzles(1000, 2, seed=0)
