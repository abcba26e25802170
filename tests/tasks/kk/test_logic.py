import itertools

import pytest

from lopti.tasks.kk.logic import canonical_key, check_statement, consistent_assignments, evaluate, solve


def brute_force(statements):
    """The textbook solver: try every assignment, keep those where knights tell the truth."""
    people = len(statements)
    return [
        list(assignment)
        for assignment in itertools.product([False, True], repeat=people)
        if all(evaluate(s, list(assignment)) == assignment[i] for i, s in enumerate(statements))
    ]


def test_classic_puzzle():
    # A: "B is a knave"; B: "A and I are of the same kind" → A knight, B knave
    statements = [["lying", 1], ["<=>", ["telling-truth", 0], ["telling-truth", 1]]]
    assert solve(statements) == [[True, False]]


def test_no_and_many_solutions():
    assert solve([["lying", 1], ["telling-truth", 0]]) == []
    assert consistent_assignments([["telling-truth", 0], ["telling-truth", 1]]).bit_count() == 4


@pytest.mark.parametrize(
    "statements",
    [
        [
            ["or", ["lying", 1], ["telling-truth", 0]],
            ["->", ["telling-truth", 0], ["lying", 2]],
            ["not", ["lying", 0]],
        ],
        [
            ["and", ["telling-truth", 1], ["telling-truth", 2], ["lying", 3]],
            ["lying", 3],
            ["not", ["not", ["lying", 0]]],
            ["<=>", ["or", ["telling-truth", 0], ["lying", 2]], ["telling-truth", 1]],
        ],
    ],
)
def test_bit_solver_agrees_with_textbook(statements):
    assert solve(statements) == sorted(brute_force(statements), key=lambda a: sum(b << j for j, b in enumerate(a)))


def test_canonical_key_ignores_operand_order_of_commutative_operators():
    a = [
        ["and", ["telling-truth", 1], ["lying", 2]],
        ["telling-truth", 0],
        ["->", ["lying", 0], ["lying", 1]],
    ]
    b = [
        ["and", ["lying", 2], ["telling-truth", 1]],
        ["telling-truth", 0],
        ["->", ["lying", 0], ["lying", 1]],
    ]
    c = [
        ["and", ["lying", 2], ["telling-truth", 1]],
        ["telling-truth", 0],
        ["->", ["lying", 1], ["lying", 0]],
    ]
    assert canonical_key(a) == canonical_key(b)
    assert canonical_key(a) != canonical_key(c)


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (["telling-truth", 5], "needs one person index"),
        (["maybe", 0], "unknown statement kind"),
        (["->", ["lying", 0]], "takes 2 operand"),
        ([], "non-empty list"),
    ],
)
def test_malformed_statements(statement, message):
    with pytest.raises(ValueError, match=message):
        check_statement(statement, 3)


def test_solver_size_limit():
    with pytest.raises(ValueError, match="the solver handles 1 to 16 people, got 17"):
        solve([["telling-truth", 0]] * 17)
