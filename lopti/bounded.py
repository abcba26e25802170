"""Calls into code that scores what a model wrote (training rewards, the evaluation judge), which may raise or hang
on a completion nobody foresaw: each failure becomes the one line that stops the run, or, where the user asked for
`reward_errors: skip`, the caller scores that completion as no reward.

`lopti.train.reward_calls` applies this to reward functions, `lopti.evaluation.scoring` to the judge. A hung Python
function cannot be interrupted, so `call_within` runs it in a daemon thread that is left behind when the run stops.
This module imports nothing heavy, so every layer may use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from lopti.errors import TrainingStopped

REWARD_ERRORS = ("stop", "skip")  # what a raising reward or judge does: stop the run, or score the sample as none
Value = TypeVar("Value")


class TimeLimitExceeded(Exception):
    """A call outlasted its time limit (distinct from a TimeoutError the called function raises itself)."""


def check_reward_errors(errors: str) -> None:
    """Raise a ValueError if `errors` is not one of `REWARD_ERRORS`."""
    if errors not in REWARD_ERRORS:
        raise ValueError(f"reward_errors must be one of {REWARD_ERRORS}, got {errors!r}")


def excerpt(completion: Any, limit: int = 60) -> str:
    """Return the start of a completion (text or chat messages), quoted, for a one-line report."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        completion = completion[-1].get("content", "")
    text = str(completion)
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def call_within(call: Callable[[], Value], timeout: float, name: str) -> Value:
    """Return `call()`, raising TimeLimitExceeded if it takes more than `timeout` seconds (0: no limit)."""
    if timeout <= 0:
        return call()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeLimitExceeded
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def over_time(what: str, timeout: float, completions: list) -> TrainingStopped:
    """Return the line that stops a run whose `what` (e.g. "reward function 'f'") outlasted `reward_timeout`."""
    first = excerpt(completions[0]) if completions else "(none)"
    return TrainingStopped(
        f"{what} took more than {timeout:g} s (reward_timeout) on {len(completions)} completion(s), the first {first}"
    )


def raised_on(what: str, error: Exception, completion: Any, skipped_as: str) -> TrainingStopped:
    """Return the line that stops a run whose `what` raised `error` on `completion`; it says what `reward_errors:
    skip` would score such a completion as (`skipped_as`)."""
    return TrainingStopped(
        f"{what} raised {type(error).__name__}: {error} on completion {excerpt(completion)}; "
        f"set reward_errors: skip to score such samples as {skipped_as}"
    )
