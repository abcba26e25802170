"""Reward functions that raise or hang: one line naming the function, or no reward for that sample (skip)."""

import asyncio
import inspect
import time

import pytest

from lopti.errors import TrainingStopped
from lopti.tasks.kk.rewards import make_reward
from lopti.train.guards import explain_reward_errors
from lopti.train.reward_calls import bounded_reward

COMPLETIONS = ["fine", "this one is poison", "fine too"]


def picky(prompts, completions, **kwargs):
    """Raise on a completion that says poison."""
    return [1 / ("poison" not in c) for c in completions]


def hangs(prompts, completions, **kwargs):
    time.sleep(30)
    return [0.0] * len(completions)


def call(func, completions=COMPLETIONS):
    return func(prompts=["p"] * len(completions), completions=completions, tag=["a", "b", "c"][: len(completions)])


def test_a_raising_reward_stops_the_run_with_one_line_naming_it_the_error_and_the_completion():
    wrapped = explain_reward_errors(bounded_reward(picky))  # as the trainer wraps it
    with pytest.raises(TrainingStopped) as caught:
        call(wrapped)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("reward function 'picky' raised ZeroDivisionError: division by zero on completion")
    assert "'this one is poison'" in message and "reward_errors: skip" in message


def test_skip_scores_the_failing_sample_as_no_reward_and_counts_it():
    counted = []
    assert call(bounded_reward(picky, "skip", count=counted.append)) == [1.0, None, 1.0]
    assert counted == [1]
    assert call(bounded_reward(picky, "skip", count=counted.append), ["fine"]) == [1.0]
    assert counted == [1]  # nothing failed: nothing counted


def test_a_hanging_reward_stops_at_its_time_limit_with_one_line():
    started = time.monotonic()
    with pytest.raises(TrainingStopped, match=r"^reward function 'hangs' took more than 0.2 s \(reward_timeout\)"):
        call(bounded_reward(hangs, timeout=0.2))
    assert time.monotonic() - started < 5


def test_no_time_limit_by_default_and_values_pass_through():
    assert call(bounded_reward(lambda prompts, completions, **kw: [0.5] * len(completions))) == [0.5] * 3


def test_lopti_rewards_are_wrapped_the_same_way():
    reward = bounded_reward(make_reward("strict"), timeout=5)
    values = reward(prompts=["<think>"], completions=["x</think><answer></answer>"], names=[["Ann"]], solution=[[True]])
    assert values == [-1.0]
    with pytest.raises(TrainingStopped, match="reward function 'kk_strict' raised"):
        reward(prompts=["<think>"], completions=["x"], names=[["Ann"]], solution=None)


def test_unknown_reward_errors_setting_is_refused():
    with pytest.raises(ValueError, match="reward_errors must be one of"):
        bounded_reward(picky, "ignore")


async def async_picky(prompts, completions, **kwargs):
    """`picky`, as a judge behind a network call would be written."""
    await asyncio.sleep(0)
    return picky(prompts, completions)


async def async_hangs(prompts, completions, **kwargs):
    await asyncio.sleep(30)
    return [0.0] * len(completions)


def test_an_async_reward_stays_a_coroutine_function_under_the_same_name():
    wrapped = explain_reward_errors(bounded_reward(async_picky))
    assert inspect.iscoroutinefunction(wrapped) and wrapped.__name__ == "async_picky"
    assert asyncio.run(call(wrapped, ["fine"])) == [1.0]


def test_an_async_reward_that_raises_stops_with_the_same_line():
    with pytest.raises(TrainingStopped) as caught:
        asyncio.run(call(explain_reward_errors(bounded_reward(async_picky))))
    assert str(caught.value).startswith(
        "reward function 'async_picky' raised ZeroDivisionError: division by zero on completion 'this one is poison'"
    )


def test_an_async_reward_skips_and_counts_the_failing_sample():
    counted = []
    assert asyncio.run(call(bounded_reward(async_picky, "skip", count=counted.append))) == [1.0, None, 1.0]
    assert counted == [1]


def test_an_async_reward_that_hangs_is_cancelled_at_its_time_limit():
    started = time.monotonic()
    with pytest.raises(TrainingStopped, match=r"^reward function 'async_hangs' took more than 0.2 s"):
        asyncio.run(call(bounded_reward(async_hangs, timeout=0.2)))
    assert time.monotonic() - started < 5


def test_a_reward_raising_timeout_error_itself_is_an_error_not_a_time_limit():
    def impatient(prompts, completions, **kwargs):
        raise TimeoutError("the judge's server did not answer")

    with pytest.raises(TrainingStopped, match="raised TimeoutError: the judge's server did not answer on completion"):
        call(bounded_reward(impatient, timeout=5))
