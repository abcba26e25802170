"""The assume-and-check trace: every value it writes is the solver's, and it ends on the solution."""

import random
import re

import pytest

from lopti.tasks.kk.generate import generate_puzzles
from lopti.tasks.kk.logic import evaluate
from lopti.tasks.kk.trace import (
    AGREE_WORDS,
    DISAGREE_WORDS,
    PEOPLE_LETTERS,
    TRY_WORDS,
    assignment_order,
    render_trace,
)

LINE_RE = re.compile(r"([a-l]) (\S+)(?: (\S+))? ([TF]) ([KN]) (\w+)")


def tries(trace: str) -> list[tuple[str, list[str]]]:
    """Split a trace into (assignment, check lines) per try."""
    found: list[tuple[str, list[str]]] = []
    for line in trace.splitlines():
        head, _, rest = line.partition(" ")
        if head in TRY_WORDS:
            found.append((rest, []))
        else:
            found[-1][1].append(line)
    return found


@pytest.mark.parametrize("people", [2, 3, 4])
def test_every_line_agrees_with_the_solver_and_the_last_try_is_the_solution(people):
    rng = random.Random(1)
    for puzzle in generate_puzzles(60, people, seed="trace-test"):
        steps = tries(render_trace(puzzle.statements, puzzle.solution, rng))
        for number, (roles, lines) in enumerate(steps):
            assignment = [role == "K" for role in roles]
            assert len(assignment) == people
            for speaker, line in enumerate(lines):
                match = LINE_RE.fullmatch(line)
                assert match, line
                letter, _, _, value, role, verdict = match.groups()
                truth = evaluate(puzzle.statements[speaker], assignment)  # the solver's own evaluation
                assert letter == PEOPLE_LETTERS[speaker]
                assert value == ("T" if truth else "F") and role == roles[speaker]
                agrees = truth == assignment[speaker]
                assert verdict in (AGREE_WORDS if agrees else DISAGREE_WORDS)
                last_line = speaker == len(lines) - 1
                assert agrees or last_line  # a try stops at its first disagreement
            if number < len(steps) - 1:
                assert verdict in DISAGREE_WORDS
        assert [role == "K" for role in steps[-1][0]] == puzzle.solution
        assert len(steps[-1][1]) == people


def test_tries_follow_binary_order_from_a_random_start_and_never_repeat():
    rng = random.Random(2)
    starts = set()
    for puzzle in generate_puzzles(80, 3, seed="trace-order"):
        tried = [roles for roles, _ in tries(render_trace(puzzle.statements, puzzle.solution, rng))]
        order = ["".join("K" if k else "N" for k in a) for a in assignment_order(3, 0)]
        start = order.index(tried[0])
        assert tried == (order[start:] + order[:start])[: len(tried)]
        starts.add(start)
    assert assignment_order(3, 0)[:2] == [(True, True, True), (True, True, False)]
    assert starts == set(range(8))


def test_the_atom_values_are_written_for_compound_statements():
    statements = [["and", ["lying", 2], ["lying", 1]], ["telling-truth", 0], ["not", ["telling-truth", 1]]]
    # solution: a K? a says c and b are knaves; find it by the solver's rule in the test itself
    from lopti.tasks.kk.logic import solve

    (solution,) = solve(statements)
    trace = render_trace(statements, solution, random.Random(0))
    first = trace.splitlines()[1]
    assert re.fullmatch(r"a cN&bN [TF]&[TF] [TF] [KN] \w+", first)
    assert any(re.fullmatch(r"c !bK ![TF] [TF] [KN] \w+", line) for line in trace.splitlines())


def test_a_statement_the_trace_cannot_show_is_refused_in_one_line():
    deep = [["and", ["telling-truth", 1], ["or", ["lying", 0], ["lying", 1]]], ["telling-truth", 0]]
    with pytest.raises(ValueError, match="depth ≤ 2"):
        render_trace(deep, [True, True], random.Random(0))
