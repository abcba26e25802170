"""A worked K&K solution a tiny model can execute: assume an assignment, check each statement, move on.

The trace tries assignments in binary order (K before N, first person first), cyclically from a random
start, and stops at the first that every statement agrees with (puzzles have exactly one). Each try checks
the speakers in order and abandons the assignment at the first statement that disagrees with its
speaker's role. One line per checked statement, every step local so a small transformer can copy it:

    test KKN                 the assignment tried: a, b and c are K, K, N
    a cN&bN T&F F K fails    a says "c is a knave and b is a knave": T and F, so F; a is a K: no

People are the letters a, b, c, ...; `xK` / `xN` say "x is a knight / knave"; `!` `&` `|` `>` `~` are not,
and, or, if-then, if-and-only-if; `T` / `F` are truth values. The words that open a try and close a line
vary among synonyms, as an LLM's phrasing does: they are the trace's low-probability tokens, which carry
no information about the answer (docs/results.md measures their share).
"""

from __future__ import annotations

import random

from lopti.tasks.kk.logic import ATOMS, Statement, evaluate

PEOPLE_LETTERS = "abcdefghijkl"
OPERATORS = {"and": "&", "or": "|", "->": ">", "<=>": "~"}
TRY_WORDS = ("try", "test", "take", "check", "pick")
AGREE_WORDS = ("ok", "fine", "holds", "fits", "good")
DISAGREE_WORDS = ("bad", "fails", "breaks", "clash", "wrong")


def _atom_text(atom: Statement) -> str:
    return f"{PEOPLE_LETTERS[atom[1]]}{'K' if atom[0] == 'telling-truth' else 'N'}"


def _truth(value: bool) -> str:
    return "T" if value else "F"


def check_text(statement: Statement, assignment: tuple[bool, ...]) -> str:
    """Return the statement in trace notation followed by its atoms' values, e.g. "cN&bN T&F"."""
    kind = statement[0]
    if kind in ATOMS:
        return _atom_text(statement)
    if kind == "not":
        atom = statement[1]
        return f"!{_atom_text(atom)} !{_truth(evaluate(atom, assignment))}"
    symbol = OPERATORS[kind]
    left, right = statement[1:]
    values = symbol.join(_truth(evaluate(operand, assignment)) for operand in (left, right))
    return f"{_atom_text(left)}{symbol}{_atom_text(right)} {values}"


def _check_shape(statement: Statement) -> None:
    """Raise a ValueError unless the trace notation can show `statement` (depth ≤ 2, operators on two atoms)."""
    kind = statement[0]
    operands = [] if kind in ATOMS else statement[1:]
    shown = kind in ATOMS or (kind == "not" and len(operands) == 1) or (kind in OPERATORS and len(operands) == 2)
    if not shown or any(operand[0] not in ATOMS for operand in operands):
        raise ValueError(f"the trace shows statements of depth ≤ 2 on at most two atoms, got {statement!r}")


def assignment_order(people: int, start: int) -> list[tuple[bool, ...]]:
    """Return all 2^people assignments in binary order (knight first, first person most significant),
    rotated to begin at index `start`."""
    order = [tuple(not (index >> (people - 1 - j) & 1) for j in range(people)) for index in range(2**people)]
    return order[start:] + order[:start]


def render_trace(statements: list[Statement], solution: list[bool], rng: random.Random) -> str:
    """Return the assume-and-check trace of a puzzle; its last try is `solution`.

    `rng` draws the start of the search and the synonyms, so one puzzle has many traces.
    """
    people = len(statements)
    if people > len(PEOPLE_LETTERS):
        raise ValueError(f"the trace names at most {len(PEOPLE_LETTERS)} people, got {people}")
    for statement in statements:
        _check_shape(statement)
    lines = []
    for assignment in assignment_order(people, rng.randrange(2**people)):
        roles = "".join("K" if knight else "N" for knight in assignment)
        lines.append(f"{rng.choice(TRY_WORDS)} {roles}")
        agrees = True
        for speaker, statement in enumerate(statements):
            value = evaluate(statement, assignment)
            agrees = value == assignment[speaker]
            verdict = rng.choice(AGREE_WORDS if agrees else DISAGREE_WORDS)
            shown = check_text(statement, assignment)
            lines.append(f"{PEOPLE_LETTERS[speaker]} {shown} {_truth(value)} {roles[speaker]} {verdict}")
            if not agrees:
                break
        if agrees:
            if list(assignment) != list(solution):
                raise ValueError("the puzzle has another consistent assignment before its solution: not unique")
            return "\n".join(lines)
    raise ValueError("no assignment agrees with every statement: the puzzle has no solution")
