"""Random Knights-and-Knaves puzzles with exactly one solution (docs/paper.md §6).

Sampling follows Xie et al. 2024: every person makes one statement; at each level the six choices
(atom, not, and, or, ->, <=>) are equally likely until the depth limit forces an atom; operands under one
operator are distinct; nobody's statement contains "I am a knave". A puzzle is kept only if it has
exactly one solution and its canonical form was not seen before.

Randomness comes from `random.Random` seeded by a string, so the same arguments give the same puzzles on
any machine and Python version.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from lopti.tasks.kk.logic import Statement, canonical_key, consistent_assignments

MIN_PEOPLE = 2
MAX_PEOPLE = 12
# A statement has about 1.5^depth nodes at width 2 and (w + 2)^depth / 2^depth at width w: these limits keep
# 900 twelve-person puzzles under a minute (the paper uses depth 2, width 2).
MAX_DEPTH = 8
MAX_WIDTH = 4
STALL_DRAWS = 20_000  # draws without a new unique puzzle after which none is left (2 people: ≤ 1,800 seen)
KINDS = ("atom", "not", "and", "or", "->", "<=>")
TEST_BYTE_LIMIT = 52  # first hash byte below this: 52/256 ≈ 20% of forms are test-only


@dataclass(frozen=True)
class Puzzle:
    """A puzzle's structure: person i says statements[i]; solution[i] is True iff person i is a knight."""

    statements: list[Statement]
    solution: list[bool]

    @property
    def people(self) -> int:
        return len(self.statements)

    @property
    def key(self) -> str:
        return canonical_key(self.statements)


def check_people(people: int) -> None:
    """Raise a ValueError unless the generator supports `people` inhabitants."""
    if not isinstance(people, int) or not MIN_PEOPLE <= people <= MAX_PEOPLE:
        raise ValueError(f"people must be an integer from {MIN_PEOPLE} to {MAX_PEOPLE}, got {people!r}")


def check_shape(depth: int, width: int) -> None:
    """Raise a ValueError unless statements of this depth and width can be generated in reasonable time."""
    if not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be a whole number from 1 to {MAX_DEPTH}, got {depth!r}")
    if not isinstance(width, int) or not 2 <= width <= MAX_WIDTH:
        raise ValueError(f"width must be a whole number from 2 to {MAX_WIDTH}, got {width!r}")


def sample_statement(rng: random.Random, speaker: int, people: int, depth: int, width: int) -> Statement:
    """Return one random statement by `speaker`, at most `depth` levels deep and `width` operands wide."""
    kind = "atom" if depth <= 1 else KINDS[rng.randrange(len(KINDS))]
    if kind == "atom":
        while True:
            role = ("telling-truth", "lying")[rng.randrange(2)]
            person = rng.randrange(people)
            if not (role == "lying" and person == speaker):  # "I am a knave" is a paradox
                return [role, person]
    if kind == "not":
        return ["not", sample_statement(rng, speaker, people, depth - 1, width)]
    count = 2 if kind in ("->", "<=>") else rng.randint(2, max(2, width))
    operands: list[Statement] = []
    while len(operands) < count:
        operand = sample_statement(rng, speaker, people, depth - 1, width)
        if operand not in operands:
            operands.append(operand)
    return [kind, *operands]


def generate_puzzles(
    count: int,
    people: int,
    seed: int | str = 0,
    depth: int = 2,
    width: int = 2,
    exclude: set[str] | frozenset[str] = frozenset(),
    max_attempts: int | None = None,
    keep: Callable[[str], bool] | None = None,
) -> list[Puzzle]:
    """Return `count` distinct puzzles with a unique solution; none whose canonical key is in `exclude`,
    and only those whose key passes `keep` when given.

    Raises a ValueError saying how many were found when `max_attempts` samples (default 200 per puzzle)
    cannot yield enough, which happens for tiny sizes where few distinct puzzles exist.
    """
    check_people(people)
    check_shape(depth, width)
    if count < 0:
        raise ValueError(f"count must be ≥ 0, got {count}")
    rng = random.Random(f"kk|{seed}|{people}|{depth}|{width}")
    attempts_left = max_attempts if max_attempts is not None else 200 * max(count, 1) + 1000
    seen = set(exclude)
    puzzles: list[Puzzle] = []
    since_new = 0
    while len(puzzles) < count:
        if attempts_left == 0 or since_new == STALL_DRAWS:
            why = f"no new one in the last {STALL_DRAWS} draws: about all there are" if since_new else "out of draws"
            raise ValueError(
                f"found only {len(puzzles)} of {count} unique {people}-person puzzles (depth {depth}, width {width}, "
                f"seed {seed!r}; {why}); ask for at most {len(puzzles)} or allow deeper statements"
            )
        attempts_left -= 1
        since_new += 1
        statements = [sample_statement(rng, i, people, depth, width) for i in range(people)]
        table = consistent_assignments(statements)
        if table.bit_count() != 1:
            continue
        key = canonical_key(statements)
        if key in seen or (keep is not None and not keep(key)):
            continue
        seen.add(key)
        since_new = 0
        index = table.bit_length() - 1
        puzzles.append(Puzzle(statements, [bool(index >> j & 1) for j in range(people)]))
    return puzzles


def is_test_form(key: str) -> bool:
    """Return True for the fixed ~20% of canonical forms reserved for test splits.

    Train puzzles are drawn only from the other forms, so no training data made with any seed (an SFT
    warm start, an RL prompt set) can contain a puzzle of any test split.
    """
    return hashlib.sha256(key.encode()).digest()[0] < TEST_BYTE_LIMIT


def is_train_form(key: str) -> bool:
    """Return True for the canonical forms that training data may use."""
    return not is_test_form(key)


def generate_splits(
    people: int,
    train: int,
    test: int,
    seed: int | str = 0,
    depth: int = 2,
    width: int = 2,
) -> tuple[list[Puzzle], list[Puzzle]]:
    """Return (train, test) puzzles of one size, from disjoint sets of canonical forms (`is_test_form`).

    Each split has its own stream, so growing `train` never changes `test`.
    """
    splits = {}
    for name, count, keep in (("test", test, is_test_form), ("train", train, is_train_form)):
        try:
            splits[name] = generate_puzzles(count, people, f"{seed}|{name}", depth, width, keep=keep)
        except ValueError as error:
            raise ValueError(f"{name} split: {error}") from None
    return splits["train"], splits["test"]
