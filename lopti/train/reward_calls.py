"""`bounded_reward`: a reward function that raises or hangs stops the run with one line, or (when asked) a sample it
raises on counts as no reward.

It wraps the call only, so it composes with any other wrapper of the reward (`guards.explain_reward_errors`
outside it): with `reward_errors="stop"` (the default) the first sample the function raises on is found and the
run stops with the function's name, the exception and an excerpt of the completion (`TrainingStopped`, exit status
1); with `"skip"` that sample's value is TRL's "no reward" (None) and the count goes to `count`. With a
`reward_timeout` above 0, a call that takes longer stops the run the same way. A hung Python function cannot be
interrupted, so the call runs in a daemon thread that is left behind when the run stops.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from trl.trainer.utils import get_callable_name

from lopti.errors import TrainingStopped
from lopti.train.guards import excerpt, one_sample

REWARD_ERRORS = ("stop", "skip")


def _call_within(func: Callable[..., Any], timeout: float, kwargs: dict[str, Any]) -> Any:
    """Return `func(**kwargs)`, raising TimeoutError if it takes more than `timeout` seconds (0: no limit)."""
    if timeout <= 0:
        return func(**kwargs)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = func(**kwargs)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"reward {get_callable_name(func)}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def bounded_reward(
    func: Callable[..., list[float]],
    errors: str = "stop",
    timeout: float = 0.0,
    count: Callable[[int], None] | None = None,
) -> Callable[..., list[float | None]]:
    """Return `func` (TRL's reward signature) with its failures handled as the module says."""
    if errors not in REWARD_ERRORS:
        raise ValueError(f"reward_errors must be one of {REWARD_ERRORS}, got {errors!r}")
    name = get_callable_name(func)  # TRL's name for it, kept on the wrapper for its metrics

    def call(kwargs: dict[str, Any]) -> Any:
        try:
            return _call_within(func, timeout, kwargs)
        except TimeoutError:
            completions = kwargs["completions"]
            raise TrainingStopped(
                f"reward function {name!r} took more than {timeout:g} s (reward_timeout) on {len(completions)} "
                f"completion(s), the first {excerpt(completions[0]) if completions else '(none)'}"
            ) from None

    @functools.wraps(func)
    def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        try:
            return call(dict(prompts=prompts, completions=completions, **kwargs))
        except TrainingStopped:
            raise
        except Exception as error:
            batch_error = error
        values: list[float | None] = []
        size, failed = len(completions), 0
        for index in range(size):
            one = one_sample(dict(prompts=prompts, completions=completions, **kwargs), index, size)
            try:
                values += call(one)
            except TrainingStopped:
                raise
            except Exception as error:
                if errors == "stop":
                    raise TrainingStopped(
                        f"reward function {name!r} raised {type(error).__name__}: {error} on completion "
                        f"{excerpt(completions[index])}; set reward_errors: skip to score such samples as no reward"
                    ) from error
                values.append(None)
                failed += 1
        if failed == 0:  # every sample alone works: the batch as a whole is what fails
            raise TrainingStopped(
                f"reward function {name!r} raised {type(batch_error).__name__}: {batch_error} on a batch of {size} "
                "completions, though on none of them alone"
            ) from batch_error
        if count is not None:
            count(failed)
        return values

    wrapped.__name__ = name  # a callable instance or a partial has no `__name__` for functools.wraps to copy
    return wrapped
