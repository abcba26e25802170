"""bench/testbed_select.py's rule: the gain bar, the collapse check, the token regime where a round asks for it."""

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
PAPER_LIKE, CONFIDENT = [18.0, 9.0, 11.0, 62.0], [11.0, 2.7, 2.8, 83.5]


@pytest.fixture
def select(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its sibling testbed_runs, as when run from bench/
    return importlib.import_module("testbed_select")


def runs(candidate, gains, shares, grad_share_low=60.0, reward=(0.3, 0.5)):
    return [
        {"candidate": list(candidate), "seed": seed, "gain": gain, "reward_first": reward[0],
         "reward_last": reward[1], "shares": shares, "grad_share_low": grad_share_low}
        for seed, gain in enumerate(gains)
    ]  # fmt: skip


def test_a_round_that_asks_for_the_regime_refuses_confident_tokens_the_other_does_not(select):
    slow, fast = (1e-4, 6), (2e-4, 6)
    grid = [*runs(slow, [20, 22], CONFIDENT), *runs(fast, [12, 14], PAPER_LIKE)]
    varied = select.Round("x.yaml", (slow, fast), (0, 1), 10.0, regime=True)
    chosen, summary = select.choose(varied, grid)
    assert chosen == fast and not summary[slow]["regime"] and summary[fast]["regime"]
    default = select.Round("x.yaml", (slow, fast), (0, 1), 10.0, regime=False)
    assert select.choose(default, grid)[0] == slow  # the larger mean gain


@pytest.mark.parametrize(
    "change",
    ["gain below the bar", "collapse", "low quartile carries too little gradient", "a share 10.5 points off"],
)
def test_a_candidate_that_misses_one_condition_fails(select, change):
    candidate = (1e-4, 6)
    shares, grad, gains, reward = list(PAPER_LIKE), 60.0, [15, 16], (0.3, 0.5)
    if change == "gain below the bar":
        gains = [9.5, 16]
    elif change == "collapse":
        reward = (0.6, 0.1)
    elif change == "low quartile carries too little gradient":
        grad = 39.0
    else:
        shares = [19.2 + 10.5, 9.0, 11.0, 60.5 - 10.5 - 0.1]
    selection = select.Round("x.yaml", (candidate,), (0, 1), 10.0, regime=True)
    assert select.choose(selection, runs(candidate, gains, shares, grad, reward))[0] is None


def test_each_round_tunes_a_recipe_that_exists_on_its_own_model(select):
    import yaml

    models = {name: yaml.safe_load((BENCH.parent / r.config).read_text())["model"] for name, r in select.ROUNDS.items()}
    assert models == {"default": "tiny", "varied": "tiny-varied", "varied-2": "tiny-varied"}
