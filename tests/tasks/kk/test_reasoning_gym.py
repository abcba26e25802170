"""Cross-check against reasoning-gym's independent K&K generator (Apache-2.0, test-only dependency)."""

import re

import pytest

from lopti.tasks.kk.logic import solve

reasoning_gym = pytest.importorskip("reasoning_gym")


def as_lists(statement):
    return [as_lists(x) if isinstance(x, tuple) else x for x in statement]


@pytest.mark.parametrize("people", range(2, 9))
def test_our_solver_agrees_with_reasoning_gym(people):
    dataset = reasoning_gym.create_dataset("knights_knaves", n_people=people, size=30, seed=100 + people)
    for item in dataset:
        meta = item["metadata"]
        statements = [as_lists(s) for s in meta["statements"]]
        assert solve(statements) == [list(meta["solution"])]
        # and with its answer text, role by role
        truthful = meta["knight_knave_terms"]["a_knight"].split()[-1]
        for name, knight in zip(meta["names"], meta["solution"], strict=True):
            role = re.search(rf"\b{name} is an? (\w+)", item["answer"]).group(1)
            assert (role == truthful) == knight
