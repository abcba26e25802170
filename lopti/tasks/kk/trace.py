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

`form="varied"` adds more such choices, so that the share of low-probability tokens a model learns to sample
is closer to an LLM's (`bench/trace_shares.py` computes it): the speakers are checked in a random order, a
verb may follow the speaker, a commutative statement shows its operands in either order, "and" and "or" may
be words, the role may be a word, and the value and the role are compared in either order. The tries and the
verdicts are the plain form's, so the last try is still the solution:

    take KNK
    b says cN or aK F or T T knave fails
"""

from __future__ import annotations

import random

from lopti.tasks.kk.logic import ATOMS, Statement, evaluate

PEOPLE_LETTERS = "abcdefghijkl"
OPERATORS = {"and": "&", "or": "|", "->": ">", "<=>": "~"}
TRY_WORDS = ("try", "test", "take", "check", "pick")
AGREE_WORDS = ("ok", "fine", "holds", "fits", "good")
DISAGREE_WORDS = ("bad", "fails", "breaks", "clash", "wrong")
FORMS = ("plain", "varied")
# The varied form's choices as weights of their alternatives. Each alternative is one token of the shipped
# tokenizer, and for 3 people no probability (nor a product of two shown by one token) lies within .03 of a
# quartile edge, where a model's estimate could fall on either side.
ORDER_OFFSET = 5  # the next speaker among n left, by rank: weight n + 5 - rank (8/21, 7/21, 6/21; 7/13, 6/13)
VERBS = (" says", " claims", " states", " tells", " asserts", " insists", " declares", " reports")
VERB_WEIGHTS = (0.3, *[0.7 / len(VERBS)] * len(VERBS))  # no verb, then each verb
SWAP_WEIGHTS = (0.6, 0.4)  # "&", "|", "~": the operands in the puzzle's order, or swapped
WORD_OPERATORS = ("and", "or")
WORD_WEIGHTS = (0.8, 0.2)  # "and" and "or" as a symbol, or as a word (as many tokens)
ROLE_WEIGHTS = (0.6, 0.4)  # the role as a letter, or as a word
PAIR_WEIGHTS = (0.65, 0.35)  # the value before the role, or after


def _atom_text(atom: Statement) -> str:
    return f"{PEOPLE_LETTERS[atom[1]]}{'K' if atom[0] == 'telling-truth' else 'N'}"


def _truth(value: bool) -> str:
    return "T" if value else "F"


def check_text(statement: Statement, assignment: tuple[bool, ...], swap: bool = False, word: bool = False) -> str:
    """Return the statement in trace notation followed by its atoms' values, e.g. "cN&bN T&F" (with `swap`,
    a two-atom statement's operands in the other order: "bN&cN F&T"; with `word`, "and" and "or" spelled out:
    "cN and bN T and F")."""
    kind = statement[0]
    if kind in ATOMS:
        return _atom_text(statement)
    if kind == "not":
        atom = statement[1]
        return f"!{_atom_text(atom)} !{_truth(evaluate(atom, assignment))}"
    symbol = f" {kind} " if word and kind in WORD_OPERATORS else OPERATORS[kind]
    left, right = statement[2:0:-1] if swap else statement[1:]
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


def _pick(rng: random.Random, weights: tuple[float, ...] | list[float]) -> int:
    """Return an index drawn with probability proportional to `weights`."""
    return rng.choices(range(len(weights)), weights)[0]


def _plain_checks(statements: list[Statement], assignment: tuple[bool, ...], rng: random.Random):
    """Return one try's check lines, speakers in order, up to the first that disagrees, and whether none did."""
    roles = "".join("K" if knight else "N" for knight in assignment)
    lines = []
    for speaker, statement in enumerate(statements):
        value = evaluate(statement, assignment)
        agrees = value == assignment[speaker]
        verdict = rng.choice(AGREE_WORDS if agrees else DISAGREE_WORDS)
        shown = check_text(statement, assignment)
        lines.append(f"{PEOPLE_LETTERS[speaker]} {shown} {_truth(value)} {roles[speaker]} {verdict}")
        if not agrees:
            return lines, False
    return lines, True


def _varied_checks(statements: list[Statement], assignment: tuple[bool, ...], rng: random.Random):
    """Return one try's check lines, speakers in random order, up to the first that disagrees, and whether none did."""
    lines, left = [], list(range(len(statements)))
    while left:
        speaker = left.pop(_pick(rng, [len(left) + ORDER_OFFSET - rank for rank in range(len(left))]))
        statement = statements[speaker]
        verb = ("", *VERBS)[_pick(rng, VERB_WEIGHTS)]
        swap = statement[0] in ("and", "or", "<=>") and _pick(rng, SWAP_WEIGHTS) == 1
        word = statement[0] in WORD_OPERATORS and _pick(rng, WORD_WEIGHTS) == 1
        value = evaluate(statement, assignment)
        role = (("N", "knave"), ("K", "knight"))[assignment[speaker]][_pick(rng, ROLE_WEIGHTS)]
        pair = (_truth(value), role) if _pick(rng, PAIR_WEIGHTS) == 0 else (role, _truth(value))
        agrees = value == assignment[speaker]
        verdict = rng.choice(AGREE_WORDS if agrees else DISAGREE_WORDS)
        shown = check_text(statement, assignment, swap, word)
        lines.append(f"{PEOPLE_LETTERS[speaker]}{verb} {shown} {' '.join(pair)} {verdict}")
        if not agrees:
            return lines, False
    return lines, True


def render_trace(statements: list[Statement], solution: list[bool], rng: random.Random, form: str = "plain") -> str:
    """Return the assume-and-check trace of a puzzle; its last try is `solution`.

    `rng` draws the start of the search and the synonyms (and, in the "varied" form, the other free choices),
    so one puzzle has many traces.
    """
    if form not in FORMS:
        raise ValueError(f"trace form must be one of {', '.join(FORMS)}, got {form!r}")
    people = len(statements)
    if people > len(PEOPLE_LETTERS):
        raise ValueError(f"the trace names at most {len(PEOPLE_LETTERS)} people, got {people}")
    for statement in statements:
        _check_shape(statement)
    checks = _plain_checks if form == "plain" else _varied_checks
    lines = []
    for assignment in assignment_order(people, rng.randrange(2**people)):
        roles = "".join("K" if knight else "N" for knight in assignment)
        lines.append(f"{rng.choice(TRY_WORDS)} {roles}")
        checked, consistent = checks(statements, assignment, rng)
        lines.extend(checked)
        if consistent:
            if list(assignment) != list(solution):
                raise ValueError("the puzzle has another consistent assignment before its solution: not unique")
            return "\n".join(lines)
    raise ValueError("no assignment agrees with every statement: the puzzle has no solution")
