"""bench/trace_shares.py: the teacher's probability of each trace token, against an enumeration of every
completion the renderer can write."""

import importlib.util
import math
from pathlib import Path

import pytest

from lopti.tasks.kk import trace
from lopti.tasks.kk.logic import solve

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "trace_shares.py"


@pytest.fixture(scope="module")
def shares():
    spec = importlib.util.spec_from_file_location("trace_shares", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def every_completion(shares, render, prefix=()):
    """Return (tokens, probability) for every sequence of picks `render` can draw that begins with `prefix`
    (the probability given those first picks)."""
    found = []

    def explore(script, probability):
        rng = shares.ScriptedRandom(script, "unused")
        tokens = render(rng)
        if len(rng.draws) == len(script):
            found.append((tokens, probability))
            return
        alternatives, _ = rng.draws[len(script)]
        for index, p in enumerate(alternatives):
            if p > 0:
                explore([*script, index], probability * p)

    explore(list(prefix), 1.0)
    return found


def enumerated_probabilities(shares, render, tokens, prefix=()):
    """Return P(token i | tokens < i) for `tokens`, summed over every completion (that begins with `prefix`)."""
    completions = every_completion(shares, render, prefix)
    assert sum(p for _, p in completions) == pytest.approx(1.0)

    def mass(i):
        return sum(p for other, p in completions if other[:i] == tokens[:i])

    return [mass(i + 1) / mass(i) for i in range(len(tokens))]


def test_a_one_choice_form_gives_the_choice_its_probability_and_every_other_token_one(shares):
    def render(rng):
        return ["x", rng.choices(["a", "b", "c"], [5, 3, 2])[0], "y", "<end>"]

    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    seen = set()
    for seed in range(20):
        tokens, probabilities = shares.token_probabilities(render, f"one|{seed}")
        assert probabilities == pytest.approx([1.0, weights[tokens[1]], 1.0, 1.0])
        seen.add(tokens[1])
    assert seen == {"a", "b", "c"}
    assert [shares.bucket(p) for p in (0.0, 0.2499, 0.25, 0.5, 0.7499, 0.75, 1.0)] == [0, 0, 1, 2, 2, 3, 3]


def test_draws_written_out_of_order_shown_by_one_token_or_by_several_match_the_enumeration(shares):
    def render(rng):
        start = ["KK", "KN", "NK", "NN"][rng.randrange(4)]  # drawn first, written after the next draw
        word = rng.choice(["try", "test", "pick"])
        verb = rng.choices(["", "says"], [0.3, 0.7])[0]  # when absent, the next choice shows at its token
        side = rng.choices([["p", "q"], ["p", "r"], ["s"]], [0.5, 0.3, 0.2])[0]  # two share their first token
        return [word, start, *([verb] if verb else []), *side, "<end>"]

    for seed in range(30):
        tokens, probabilities = shares.token_probabilities(render, f"crafted|{seed}")
        assert probabilities == pytest.approx(enumerated_probabilities(shares, render, tokens))


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from lopti.models.embedded import SHIPPED

    return AutoTokenizer.from_pretrained(SHIPPED / "tiny")


# a knave says "b is a knave and a is a knight", b a knave says "a is not a knave": the solution is the last try
STATEMENTS = [["and", ["lying", 1], ["telling-truth", 0]], ["not", ["lying", 0]]]


def two_person_render(tokenizer, form):
    (solution,) = solve(STATEMENTS)
    assert solution == [False, False]

    def render(rng):
        text = trace.render_trace(STATEMENTS, solution, rng, form) + tokenizer.eos_token
        return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids

    return render


def test_the_plain_form_matches_the_enumeration_with_its_synonym_drawn_after_the_start(shares, tokenizer, monkeypatch):
    monkeypatch.setattr(trace, "TRY_WORDS", ("try", "take"))  # fewer synonyms: every completion is enumerated
    monkeypatch.setattr(trace, "AGREE_WORDS", ("ok", "fine"))
    monkeypatch.setattr(trace, "DISAGREE_WORDS", ("bad",))
    render = two_person_render(tokenizer, "plain")
    for seed in range(6):
        tokens, probabilities = shares.token_probabilities(render, f"plain|{seed}")
        assert probabilities == pytest.approx(enumerated_probabilities(shares, render, tokens))
        assert probabilities[0] == pytest.approx(0.5)  # the synonym, written before the start it follows


def test_the_varied_form_matches_the_enumeration_of_its_last_try(shares, tokenizer, monkeypatch):
    monkeypatch.setattr(trace, "TRY_WORDS", ("try",))
    monkeypatch.setattr(trace, "AGREE_WORDS", ("ok", "fine"))
    monkeypatch.setattr(trace, "VERBS", (" says", " claims"))
    monkeypatch.setattr(trace, "VERB_WEIGHTS", (0.3, 0.4, 0.3))
    render = two_person_render(tokenizer, "varied")
    newline = tokenizer.backend_tokenizer.encode("\n", add_special_tokens=False).ids[0]
    compared = 0
    for seed in range(30):
        tokens, probabilities = shares.token_probabilities(render, f"varied|{seed}")
        head = tokens.index(newline)
        if tokenizer.decode(tokens[:head]) != "try NN":
            continue  # only traces that start at the solution: one try, every completion enumerated
        start = [i for i, (a, b) in enumerate(trace.assignment_order(2, 0)) if not a and not b]
        exact = enumerated_probabilities(shares, render, tokens, prefix=start)
        assert probabilities[head:] == pytest.approx(exact[head:])  # after the tried roles, which fix the start
        assert math.prod(probabilities[:head]) == pytest.approx(0.25)
        assert sorted({round(p, 4) for p in probabilities}) != [0.25, 1.0]  # the line's choices show
        compared += 1
        if compared == 2:
            break
    assert compared == 2


def test_a_draw_the_script_cannot_see_is_refused(shares):
    with pytest.raises(ValueError, match="random"):
        shares.ScriptedRandom([], "seed").random()
    with pytest.raises(ValueError, match="k = 1"):
        shares.ScriptedRandom([], "seed").choices("ab", [1, 1], k=2)
    rng = shares.ScriptedRandom([2, 5], "seed")
    assert rng.randrange(4) == 2 and rng.choice("xy") in "xy" and rng.draws[0] == ([0.25] * 4, 2)
