"""K&K rewards (docs/paper.md §6). Each scorer maps one assistant text to a float and never raises.

The assistant text is the prefilled part of the assistant turn (the paper's "<think>") plus the
completion. `logic_rl` reproduces the paper's reward exactly, except that only a role word spelt exactly
"knight" or "knave" in ASCII (any case) names a role. `strict` keeps its values but reads the answer block
clause by clause: every clause with a role word must be a plain "(k) Name is a role", each
name must get exactly one, and no clause may negate, condition or hedge ("It is false that ...", "If ...");
it also tolerates case and spacing in tags and forgives a model that writes its own "<think>". `partial`
gives the share of correctly named roles under the same parser; `accuracy` is 1 iff it is exactly right.
`lenient` reads prose. `make_reward` wraps a scorer for TRL's `reward_funcs`; `compute_score` is verl's
custom-reward hook. Every scorer takes time linear in the text's length (for a given puzzle).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from lopti.tasks.completions import completion_text, ended_properly, final_text, prefilled_think
from lopti.tasks.kk.prompts import THINK_PREFILL
from lopti.tasks.kk.render import DEFAULT_ROLES, Roles

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
FORMAT_OK, FORMAT_BAD = 1.0, -1.0
CORRECT, WRONG, UNPARSEABLE = 2.0, -1.5, -2.0
WORST = FORMAT_BAD + UNPARSEABLE
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# "(?:(/)\s*)?" rather than "(/?)\s*": two optional runs of spaces side by side backtrack quadratically
LOOSE_TAG_RE = re.compile(r"<\s*(?:(/)\s*)?(think|answer)\s*>", re.IGNORECASE)
# Where a clause of an answer ends: a line, a sentence, a comma, a colon or semicolon, "and", or "(k)".
CLAUSE_END_RE = re.compile(r"[\n.,;:]|\band\b|\(\d+\)", re.IGNORECASE)
# Words that make a statement negated, conditional or hedged rather than plain; also any "...n't", "~" or "¬".
QUALIFIERS = frozenset({
    "not", "no", "never", "none", "false", "untrue", "wrong", "incorrect", "if", "iff", "unless", "then",
    "suppose", "supposing", "assume", "assuming", "whether", "maybe", "perhaps", "possibly", "probably",
    "either", "neither", "nor", "or", "except", "but", "only", "otherwise", "unclear", "unknown", "cannot",
})  # fmt: skip
WORD_RE = re.compile(r"[\w'’]+")
# Letters that look like ASCII ones but that NFKD does not take apart; any other non-ASCII letter left in a word
# still stands for any one letter (`_lookalike_re`).
CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁԛԝкмнтвѵ" "АВЕКМНОРСТХІЈЅԜ"  # Cyrillic
    "αβεηικνορτυχ" "ΑΒΕΗΙΚΜΝΟΡΤΥΧ"  # Greek
    "ıɡɑ" "ᴀʙᴄᴅᴇɢʜɪᴊᴋʟᴍɴᴏᴘʀᴛᴜᴠᴡʏᴢ",  # Latin: dotless i, script g and a, small capitals
    "aeopcyxijsdqwkmhtbv" "ABEKMHOPCTXIJSW" "abenikvoptux" "ABEHIKMNOPTYX" "iga" "abcdeghijklmnoprtuvwyz",
)  # fmt: skip

# Per name in puzzle order: True = truthful role, False = liar, None = a look-alike role word (logic_rl reads
# it as neither role); None as a whole = unparseable.
Parsed = list[bool | None] | None


def _answer_block(text: str) -> str | None:
    """Return the last <answer> block when the four tags appear once each and in order, else None."""
    positions = []
    for tag in TAGS:
        if text.count(tag) != 1:
            return None
        positions.append(text.find(tag))
    if positions != sorted(positions):
        return None
    return ANSWER_RE.findall(text)[-1].strip()


def _role_pattern(roles: Roles) -> str:
    # (?a:...) folds case in ASCII only: "knıght" (dotless i) or "Knight" (Kelvin sign) is no role word
    return rf"\b(?a:({re.escape(roles[0])}|{re.escape(roles[1])}))\b"


def _names_pattern(names: list[str]) -> str:
    return "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))


def _assignment_re(names: list[str], roles: Roles) -> re.Pattern:
    """Return the pattern of "Name is a role": group 1 the name, group 2 the role word."""
    return re.compile(rf"\b({_names_pattern(names)})\s+is\s+a\s+{_role_pattern(roles)}", re.IGNORECASE)


def _name_index(names: list[str]) -> dict[str, int]:
    return {name.casefold(): index for index, name in enumerate(names)}


def _folded(text: str) -> str:
    """Return `text` as it reads: compatibility forms (fullwidth, Kelvin sign, math letters) and accents taken
    apart, combining marks and invisible characters (zero-width space, soft hyphen) dropped, `CONFUSABLES` mapped."""
    parts = unicodedata.normalize("NFKD", text)
    kept = "".join(c for c in parts if c.isascii() or unicodedata.category(c) not in ("Mn", "Me", "Cf"))
    return kept.translate(CONFUSABLES)


@functools.cache
def _lookalike_re(roles: Roles) -> re.Pattern:
    """Return the pattern of a word of a role word's length whose every letter is the role word's (ASCII case
    aside) or a non-ASCII one; fixed-length alternatives, so a search is linear in the text's length."""
    words = ("".join(rf"(?:(?i:{re.escape(c)})|[^\x00-\x7f])" for c in role) for role in roles)
    return re.compile(rf"(?<!\w)(?:{'|'.join(words)})(?!\w)")


def _has_lookalike(clause: str, roles: Roles) -> bool:
    """Return True iff the clause holds a word that reads as a role word but is not one in ASCII: "Knave" with a
    Kelvin sign, "knіght" with a Cyrillic і, "knave" with a zero-width space inside, "ｋｎａｖｅ" (fullwidth).

    A word counts once `_folded` when at least half its letters are the role word's ASCII ones, so that a
    word of another script that happens to be as long ("рыцарь") is not one.
    """
    if clause.isascii():
        return False
    ascii_words = len(re.findall(_role_pattern(roles), clause, re.IGNORECASE))
    read = [
        word for word in _lookalike_re(tuple(roles)).findall(_folded(clause)) if 2 * _ascii_letters(word) >= len(word)
    ]
    return len(read) > ascii_words


def _ascii_letters(word: str) -> int:
    return sum(c.isascii() and c.isalpha() for c in word)


def _qualified(clause: str) -> bool:
    """Return True iff the clause holds a word that negates, conditions or hedges (`QUALIFIERS`)."""
    return (
        "~" in clause
        or "¬" in clause
        or any(word in QUALIFIERS or word.endswith(("n't", "n’t")) for word in WORD_RE.findall(clause.lower()))
    )


def _truthful(word: str, roles: Roles) -> bool | None:
    """Return True (truthful role) or False for a role word spelt as one (ASCII case aside), else None."""
    spelt = re.fullmatch(rf"(?a:({re.escape(roles[0])})|{re.escape(roles[1])})", word, re.IGNORECASE)
    return None if spelt is None else spelt.group(1) is not None


def _logic_rl_parse(answer: str, names: list[str], roles: Roles) -> Parsed:
    lowered = answer.lower()
    if lowered.count(roles[0].lower()) + lowered.count(roles[1].lower()) != len(names):
        return None  # the paper counts substrings, so "knights" counts too
    parsed = []
    for name in names:
        # the paper's pattern and its first match; Unicode case folding lets it match "knıght" too
        pattern = rf"\b{re.escape(name)}\b\s+is\s+a\s+\b({re.escape(roles[0])}|{re.escape(roles[1])})\b"
        found = re.search(pattern, answer, flags=re.IGNORECASE)
        if not found:
            return None
        # Logic-RL compares the word, lower-cased, with the right role, so a look-alike such as "knıght" is
        # neither role and the answer is wrong; "Knight" (Kelvin sign) lowers to "knight" but is no role here
        parsed.append(_truthful(found.group(1), roles))
    return parsed


def _score(answer: str | None, parsed: Parsed, solution: list[bool]) -> float:
    if answer is None:
        return FORMAT_BAD + UNPARSEABLE
    if parsed is None:
        return FORMAT_OK + UNPARSEABLE
    return FORMAT_OK + (CORRECT if parsed == list(solution) else WRONG)


def logic_rl_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the paper's reward: 3 (right), −0.5 (wrong), −1 (unparseable), −3 (bad format).

    As in Logic-RL, an answer line is read wherever "Name is a role" appears, so "It is false that Zoe is
    a knight" gives Zoe the role knight; `strict` does not.
    """
    try:
        answer = _answer_block(text)
        return _score(answer, _logic_rl_parse(answer, names, roles) if answer else None, solution)
    except Exception:  # a reward must never stop training
        return WORST


def strict_answer(text: str) -> str | None:
    """Return the answer block after normalising tag spelling and a doubled opening <think>."""
    text = LOOSE_TAG_RE.sub(lambda m: f"<{m.group(1) or ''}{m.group(2).lower()}>", text)
    text = re.sub(r"^<think>\s*<think>", "<think>", text.lstrip())
    return _answer_block(text)


def strict_parse(answer: str, names: list[str], roles: Roles = DEFAULT_ROLES) -> Parsed:
    """Return the roles per name when the answer states each person's role once, plainly, and nothing else.

    The answer is cut into clauses (`CLAUSE_END_RE`). A clause that is "Name is a role" (list marks
    around it allowed) gives that role; any other clause that uses a role word or holds a qualifier
    (`QUALIFIERS`: "It is false that", "If", "maybe") makes the whole answer unparseable. Other prose
    ("So Ann and Cy are knights.") is allowed.
    """
    plain = re.compile(rf"[\s\d()\[\]*#-]*{_assignment_re(names, roles).pattern}[\s*]*", re.IGNORECASE)
    role_word = re.compile(_role_pattern(roles), re.IGNORECASE)
    index = _name_index(names)
    given: list[list[bool | None]] = [[] for _ in names]
    for clause in filter(None, CLAUSE_END_RE.split(answer)):  # filter: skip empty clauses at C speed
        if _has_lookalike(clause, roles):
            return None
        if not role_word.search(clause):
            if _qualified(clause):
                return None
            continue
        assignment = plain.fullmatch(clause)
        if not assignment or assignment.group(1).casefold() not in index:
            return None
        given[index[assignment.group(1).casefold()]].append(_truthful(assignment.group(2), roles))
    return [roles_of[0] for roles_of in given] if all(len(roles_of) == 1 for roles_of in given) else None


def strict_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the paper's values (3, −0.5, −1, −3) under the strict parser."""
    try:
        answer = strict_answer(text)
        return _score(answer, strict_parse(answer, names, roles) if answer else None, solution)
    except Exception:
        return WORST


def partial_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the share of people given their right role when the strict parser reads the answer, else 0
    (an answer that drops a name or hedges must not keep the other roles' credit)."""
    try:
        answer = strict_answer(text)
        parsed = strict_parse(answer, names, roles) if answer else None
        if parsed is None:
            return 0.0
        return sum(p == s for p, s in zip(parsed, solution, strict=True)) / len(names)
    except Exception:
        return 0.0


def lenient_score(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return the share of people whose last plainly stated role is right, ignoring the answer format.

    For models that answer in prose (an instruct model that never writes the tags): the `final_text` is
    read, its last <answer>...</answer> block if there is one, and for each name the last "Name is a
    <role>" counts, except in a clause with a qualifier ("If Zoe is a knight, ..."); a name never given a
    role, or last named in a clause with a look-alike role word (`_has_lookalike`), counts as wrong.
    """
    try:
        graded = final_text(text)
        close = graded.rfind("</answer>")
        opening = graded.rfind("<answer>", 0, max(close, 0))
        if opening >= 0:
            graded = graded[opening + len("<answer>") : close]
        assignment, index = _assignment_re(names, roles), _name_index(names)
        last: dict[int, bool | None] = {}
        mentioned = re.compile(rf"\b({_names_pattern(names)})\b", re.IGNORECASE)
        for clause in filter(None, CLAUSE_END_RE.split(graded)):
            if _has_lookalike(clause, roles):  # the last word on whoever it names is no role
                last.update((index[name.casefold()], None) for name in mentioned.findall(clause))
                continue
            found = assignment.findall(clause)
            if found and not _qualified(clause):
                for name, role in found:
                    if name.casefold() in index:
                        last[index[name.casefold()]] = _truthful(role, roles)
        right = (last.get(i) == truthful for i, (_, truthful) in enumerate(zip(names, solution, strict=True)))
        return sum(right) / len(names)
    except Exception:
        return 0.0


def accuracy(text: str, names: list[str], solution: list[bool], roles: Roles = DEFAULT_ROLES) -> float:
    """Return 1.0 iff the strictly parsed roles equal the solution, else 0.0."""
    return float(strict_score(text, names, solution, roles) == FORMAT_OK + CORRECT)


SCORERS: dict[str, Callable[..., float]] = {
    "logic_rl": logic_rl_score,
    "strict": strict_score,
    "partial": partial_score,
    "lenient": lenient_score,
    "accuracy": accuracy,
}


def make_reward(
    name: str, eos_token_id: int | None = None, pad_token_id: int | None = None
) -> Callable[..., list[float]]:
    """Return a reward function with TRL's `reward_funcs` signature for scorer `name`.

    It reads the dataset columns `names` and `solution` (and `roles` if present), and puts the prompt's
    pre-filled "<think>" back in front of each completion before scoring. With `eos_token_id`, a
    completion that did not end on it (truncated, or padded) scores as a format failure.
    """
    if name not in SCORERS:
        raise ValueError(f"unknown K&K reward {name!r}; choose one of {', '.join(SCORERS)}")
    scorer = SCORERS[name]
    failure = scorer("", [""], [True])

    def reward(prompts: list, completions: list, names: list, solution: list, **kwargs: Any) -> list[float]:
        roles = kwargs.get("roles") or [DEFAULT_ROLES] * len(completions)
        ids = kwargs.get("completion_ids") or [None] * len(completions)
        return [
            failure
            if eos_token_id is not None and i is not None and not ended_properly(i, eos_token_id, pad_token_id)
            else scorer(prefilled_think(p) + completion_text(c), n, s, tuple(r))
            for p, c, n, s, r, i in zip(prompts, completions, names, solution, roles, ids, strict=True)
        ]

    reward.__name__ = f"kk_{name}"
    return reward


def _ground_truth_roles(ground_truth: dict) -> tuple[list[str], list[bool]]:
    if "names" in ground_truth and "solution" in ground_truth:
        return list(ground_truth["names"]), [bool(x) for x in ground_truth["solution"]]
    lines = re.findall(r"\(\d+\)\s*(.+?)\s+is\s+a\s+(knight|knave)", ground_truth["solution_text_format"])
    return [name for name, _ in lines], [role == "knight" for _, role in lines]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: dict,
    extra_info: dict | None = None,
    reward: str = "logic_rl",
) -> float:
    """verl's custom reward hook: score a decoded response against a K&K ground truth.

    `ground_truth` is lopti's ({"names", "solution"}) or Logic-RL's ({"solution_text_format"}). The
    pre-filled "<think>" comes from `extra_info["prefill"]`, "<think>" by default as in the paper.
    """
    try:
        names, solution = _ground_truth_roles(ground_truth)
        prefill = (extra_info or {}).get("prefill", THINK_PREFILL)
        return SCORERS[reward](prefill + solution_str, names, solution)
    except Exception:
        return WORST
