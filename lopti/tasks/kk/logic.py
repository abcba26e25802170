"""Knights-and-Knaves statements: truth tables, the brute-force solver and a canonical form.

A statement is a nested list with 0-based person indices (docs/paper.md §6):
`["telling-truth", j]` (j is a knight), `["lying", j]` (j is a knave), `["not", s]`, `["and", s1, s2, ...]`,
`["or", s1, s2, ...]`, `["->", s1, s2]`, `["<=>", s1, s2]`. Person i says `statements[i]`.

The solver is brute force over all 2^N assignments, done as bit operations: a statement's truth table
is one Python int whose bit `a` is its truth value under assignment `a` (person j is a knight in `a`
iff bit j of `a` is set). That makes a 7-person check a few dozen big-int operations.
"""

from __future__ import annotations

import functools
import json
from typing import Any

Statement = list[Any]

ATOMS = ("telling-truth", "lying")
COMMUTATIVE = ("and", "or", "<=>")
MAX_SOLVER_PEOPLE = 16  # 2^16 assignments: still instant; beyond that tables grow past 8 KiB per statement


@functools.cache
def _knight_tables(people: int) -> tuple[tuple[int, ...], int]:
    """Return, per person, the truth table of "j is a knight", and the all-true table."""
    size = 1 << people
    tables = []
    for j in range(people):
        table = ((1 << (1 << j)) - 1) << (1 << j)  # one period: 2^j zeros, then 2^j ones
        width = 1 << (j + 1)
        while width < size:  # repeat the period by doubling
            table |= table << width
            width *= 2
        tables.append(table)
    return tuple(tables), (1 << size) - 1


def truth_table(statement: Statement, knights: tuple[int, ...], everything: int) -> int:
    """Return the truth table of `statement` given the per-person knight tables."""
    kind = statement[0]
    if kind == "telling-truth":
        return knights[statement[1]]
    if kind == "lying":
        return everything & ~knights[statement[1]]
    parts = [truth_table(s, knights, everything) for s in statement[1:]]
    if kind == "not":
        return everything & ~parts[0]
    if kind == "and":
        result = everything
        for part in parts:
            result &= part
        return result
    if kind == "or":
        result = 0
        for part in parts:
            result |= part
        return result
    if kind == "->":
        return everything & (~parts[0] | parts[1])
    if kind == "<=>":
        return everything & ~(parts[0] ^ parts[1])
    raise ValueError(f"unknown statement kind {kind!r} in {statement}")


def consistent_assignments(statements: list[Statement]) -> int:
    """Return the table of assignments where every knight's statement is true and every knave's false."""
    people = len(statements)
    if not 1 <= people <= MAX_SOLVER_PEOPLE:
        raise ValueError(f"the solver handles 1 to {MAX_SOLVER_PEOPLE} people, got {people}")
    knights, everything = _knight_tables(people)
    result = everything
    for i, statement in enumerate(statements):
        check_statement(statement, people)
        result &= everything & ~(knights[i] ^ truth_table(statement, knights, everything))
    return result


def solve(statements: list[Statement]) -> list[list[bool]]:
    """Return every solution (one bool per person, True = knight), in assignment order."""
    table = consistent_assignments(statements)
    people = len(statements)
    solutions = []
    while table:
        low = table & -table
        index = low.bit_length() - 1
        solutions.append([bool(index >> j & 1) for j in range(people)])
        table ^= low
    return solutions


def evaluate(statement: Statement, solution: list[bool]) -> bool:
    """Return the truth of `statement` when person j is a knight iff solution[j]."""
    kind = statement[0]
    if kind == "telling-truth":
        return solution[statement[1]]
    if kind == "lying":
        return not solution[statement[1]]
    values = [evaluate(s, solution) for s in statement[1:]]
    if kind == "not":
        return not values[0]
    if kind == "and":
        return all(values)
    if kind == "or":
        return any(values)
    if kind == "->":
        return (not values[0]) or values[1]
    if kind == "<=>":
        return values[0] == values[1]
    raise ValueError(f"unknown statement kind {kind!r} in {statement}")


def check_statement(statement: Statement, people: int) -> None:
    """Raise a ValueError unless `statement` is well formed for `people` inhabitants."""
    if not isinstance(statement, (list, tuple)) or not statement:
        raise ValueError(f"a statement must be a non-empty list, got {statement!r}")
    kind = statement[0]
    if kind in ATOMS:
        if len(statement) != 2 or not isinstance(statement[1], int) or not 0 <= statement[1] < people:
            raise ValueError(f"{kind!r} needs one person index in [0, {people}), got {statement!r}")
        return
    arity = {"not": (1, 1), "->": (2, 2), "<=>": (2, 2), "and": (2, None), "or": (2, None)}
    if kind not in arity:
        raise ValueError(f"unknown statement kind {kind!r} in {statement!r}")
    low, high = arity[kind]
    operands = len(statement) - 1
    if operands < low or (high is not None and operands > high):
        raise ValueError(f"{kind!r} takes {low}{'' if high == low else '+'} operand(s), got {statement!r}")
    for operand in statement[1:]:
        check_statement(operand, people)


def canonical(statement: Statement) -> Statement:
    """Return `statement` with the operands of commutative operators sorted, for duplicate detection."""
    if statement[0] in ATOMS:
        return [statement[0], int(statement[1])]
    operands = [canonical(s) for s in statement[1:]]
    if statement[0] in COMMUTATIVE:
        operands.sort(key=lambda s: json.dumps(s))
    return [statement[0], *operands]


def canonical_key(statements: list[Statement]) -> str:
    """Return a string that is equal for two puzzles iff their statements are the same up to commutation."""
    return json.dumps([canonical(s) for s in statements], separators=(",", ":"))
