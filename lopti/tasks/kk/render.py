"""English text for Knights-and-Knaves puzzles, in lopti's own wording (docs/paper.md §6)."""

from __future__ import annotations

import random

from lopti.tasks.kk.logic import ATOMS, Statement

NAMES = (
    "Aaron", "Abigail", "Adam", "Alice", "Amelia", "Ava", "Benjamin", "Bella", "Caleb", "Chloe",
    "Daniel", "David", "Dylan", "Elena", "Elijah", "Ella", "Emily", "Emma", "Ethan", "Evelyn",
    "Finn", "Grace", "Hannah", "Harper", "Henry", "Isaac", "Isabella", "Jack", "Jacob", "James",
    "Julia", "Kevin", "Laura", "Leo", "Liam", "Lily", "Logan", "Lucas", "Luna", "Mason",
    "Mia", "Michael", "Nathan", "Noah", "Nora", "Olivia", "Oscar", "Owen", "Penelope", "Ruby",
    "Samuel", "Sarah", "Sofia", "Thomas", "Victoria", "William", "Zoe",
)  # fmt: skip

SAYINGS = (
    "{name} says that {claim}.",
    "{name} claims that {claim}.",
    "{name} states that {claim}.",
    "{name} tells you that {claim}.",
    "{name} insists that {claim}.",
    "{name} declares that {claim}.",
    "{name} remarks that {claim}.",
    "{name} mentions that {claim}.",
    "{name} asserts that {claim}.",
    "According to {name}, {claim}.",
    "In {name}'s words: {claim}.",
    "{name} reports that {claim}.",
)

OPENINGS = (
    "On an island every inhabitant is either a {a} or a {b}. {A}s always tell the truth and {b}s always lie. "
    "You meet {count} inhabitants: {names}.",
    "Each person on this island is a {a}, who only speaks the truth, or a {b}, who only speaks falsehoods. "
    "{count} of them stand before you: {names}.",
    "You arrive on an island where {a}s never lie and {b}s never tell the truth; everyone is one or the "
    "other. Here are {count} inhabitants: {names}.",
)

QUESTIONS = (
    "Who is a {a} and who is a {b}?",
    "So who is a {a} and who is a {b}?",
    "Can you tell who is a {a} and who is a {b}?",
)


Roles = tuple[str, str]
DEFAULT_ROLES: Roles = ("knight", "knave")  # (truthful, liar), as in the paper


def pick_names(rng: random.Random, people: int) -> list[str]:
    """Return `people` distinct names drawn without replacement."""
    if people > len(NAMES):
        raise ValueError(f"only {len(NAMES)} names are available, asked for {people}")
    return rng.sample(NAMES, people)


def _join(parts: list[str], conjunction: str) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" {conjunction} " + parts[-1]


def _atom(statement: Statement, names: list[str], roles: Roles, negated: bool = False) -> str:
    role = roles[0] if statement[0] == "telling-truth" else roles[1]
    return f"{names[statement[1]]} is {'not ' if negated else ''}a {role}"


def render_statement(statement: Statement, names: list[str], roles: Roles = DEFAULT_ROLES, nested: bool = False) -> str:
    """Return the English form of `statement`; nested compounds are parenthesised to stay unambiguous."""
    kind = statement[0]
    if kind in ATOMS:
        return _atom(statement, names, roles)
    if kind == "not":
        operand = statement[1]
        if operand[0] in ATOMS:
            return _atom(operand, names, roles, negated=True)
        return f"it is false that {render_statement(operand, names, roles, nested=True)}"
    operands = [render_statement(s, names, roles, nested=True) for s in statement[1:]]
    if kind == "and":
        text = _join(operands, "and")
    elif kind == "or":
        text = _join(operands, "or")
    elif kind == "->":
        text = f"if {operands[0]} then {operands[1]}"
    else:
        text = f"{operands[0]} if and only if {operands[1]}"
    return f"({text})" if nested else text


def render_quiz(statements: list[Statement], names: list[str], rng: random.Random, roles: Roles = DEFAULT_ROLES) -> str:
    """Return the puzzle text: an opening naming everyone, one sentence per statement, the question."""
    fill = {"a": roles[0], "A": roles[0].capitalize(), "b": roles[1]}
    opening = rng.choice(OPENINGS).format(count=len(names), names=_join(names, "and"), **fill)
    lines = [opening]
    for speaker, statement in enumerate(statements):
        lines.append(rng.choice(SAYINGS).format(name=names[speaker], claim=render_statement(statement, names, roles)))
    lines.append(rng.choice(QUESTIONS).format(**fill))
    return " ".join(lines)


def render_solution(names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> str:
    """Return the answer lines "(k) Name is a knight|knave", one per person."""
    return "\n".join(
        f"({k}) {name} is a {roles[0] if knight else roles[1]}"
        for k, (name, knight) in enumerate(zip(names, solution, strict=True), start=1)
    )


def render_terse(statements: list[Statement], names: list[str], roles: Roles = DEFAULT_ROLES) -> str:
    """Return a short form of the puzzle for tiny models: one numbered "(k) Name: claim." line per person.

    The numbering matches the answer lines "(k) Name is a ...", so a small model can copy each name
    from the line with the same number instead of counting through a list.
    """
    claims = "\n".join(f"({i + 1}) {names[i]}: {render_statement(s, names, roles)}." for i, s in enumerate(statements))
    return f"{roles[0].capitalize()}s tell the truth, {roles[1]}s lie.\n{claims}"
