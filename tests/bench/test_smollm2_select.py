"""bench/smollm2_select.py's rule: the sampled-accuracy window, the cut limit, the gap, the tie on length, and a
validation split outside the recipe's training problems."""

import importlib
from pathlib import Path

import pytest

from lopti.tasks.math.data import math_records
from lopti.tasks.math.generate import is_test_problem
from lopti.tasks.math.prompts import INSTRUCTION

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def select(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("smollm2_select")


def measured(select, **per_candidate):
    """Return measured.json's content: per "template|level", the measures (greedy, avg@8, pass@8, cut, length)."""
    return {key.replace("_", "|"): dict(zip(select.MEASURES, values, strict=True))
            for key, values in per_candidate.items()}  # fmt: skip


def test_the_largest_gap_wins_among_eligible_candidates(select):
    rows = select.candidates(measured(select,
        chat_1=(0, 0, 0, 90, 120), chat_2=(0, 0, 0, 95, 124),  # never boxed, cut: not eligible
        **{"chat-example_1": (40, 30, 70, 1, 40), "chat-example_2": (10, 5, 30, 2, 60)},
    ))  # fmt: skip
    by = {(r["template"], r["levels"]): r for r in rows}
    assert not by["chat", "1"]["eligible"] and not by["chat-example", "2"]["eligible"]  # avg@8 5% < 10%
    assert by["chat-example", "1-2"]["avg@8"] == pytest.approx(17.5) and by["chat-example", "1-2"]["eligible"]
    chosen = select.choose(rows)
    assert (chosen["template"], chosen["levels"]) == ("chat-example", "1")  # gap 40 against 1-2's 32.5


def test_within_the_tie_the_shorter_completion_wins_and_none_eligible_is_none(select):
    rows = select.candidates(measured(select,
        chat_1=(30, 20, 60, 10, 90), chat_2=(30, 20, 61, 10, 100),
        **{"chat-example_1": (30, 20, 58, 0, 45), "chat-example_2": (30, 20, 80, 50, 50)},  # 2 and 1-2: cut > 20%
    ))  # fmt: skip
    chosen = select.choose(rows)
    assert (chosen["template"], chosen["levels"]) == ("chat-example", "1")  # gap 38, within 3 of 41, shortest
    assert select.choose([{**r, "eligible": False} for r in rows]) is None


def test_validation_problems_are_training_share_problems_outside_the_training_set(select, monkeypatch):
    monkeypatch.setattr(select, "TRAINING", dict(train=300, seed=0))
    monkeypatch.setattr(select, "VALIDATION_PROBLEMS", 50)
    rows = select.validation_rows(1, "chat-example")
    training = {r["problem"] for r in math_records("1", train=300, test=0, seed=0)["train"]}
    problems = [r["prompt"][-1]["content"].removesuffix(" " + INSTRUCTION) for r in rows]
    assert len(set(problems)) == 50 and not training & set(problems)
    assert not any(is_test_problem(p) for p in problems)
