"""`bounded_reward`: a reward function that raises or hangs stops the run with one line, or (when asked) a sample it
raises on counts as no reward.

It wraps the call only, so it composes with any other wrapper of the reward (`guards.explain_reward_errors`
outside it): with `reward_errors="stop"` (the default) the first sample the function raises on is found and the
run stops with the function's name, the exception and an excerpt of the completion (`TrainingStopped`, exit status
1); with `"skip"` that sample's value is TRL's "no reward" (None) and the count goes to `count`. With a
`reward_timeout` above 0, a call that takes longer stops the run the same way (`lopti.bounded`). An async reward
stays a coroutine function, which TRL awaits with the others; its time limit is `asyncio.wait_for`'s, which cancels
the coroutine at its next `await`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from trl.trainer.utils import get_callable_name, is_async_callable

from lopti.bounded import TimeLimitExceeded, call_within, check_reward_errors, over_time, raised_on
from lopti.errors import TrainingStopped
from lopti.train.guards import one_sample


class _Fallback:
    """Scores a batch its reward function raised on sample by sample: what stays of TRL's values, what is counted."""

    def __init__(self, what: str, errors: str, kwargs: dict[str, Any]) -> None:
        self.what, self.errors, self.kwargs = what, errors, kwargs
        self.completions = kwargs["completions"]
        self.values: list[float | None] = []
        self.failed = 0

    def samples(self) -> list[dict[str, Any]]:
        """Return the reward call's keyword arguments of each sample alone."""
        size = len(self.completions)
        return [one_sample(self.kwargs, index, size) for index in range(size)]

    def failed_on(self, error: Exception) -> None:
        """Score the sample in turn as no reward, or stop the run (`reward_errors: stop`)."""
        if self.errors == "stop":
            raise raised_on(self.what, error, self.completions[len(self.values)], "no reward") from error
        self.values.append(None)
        self.failed += 1

    def result(self, batch_error: Exception, count: Callable[[int], None] | None) -> list[float | None]:
        """Return the values, once every sample was scored; stop the run if every sample alone worked."""
        if self.failed == 0:  # the batch as a whole is what fails
            raise TrainingStopped(
                f"{self.what} raised {type(batch_error).__name__}: {batch_error} on a batch of "
                f"{len(self.completions)} completions, though on none of them alone"
            ) from batch_error
        if count is not None:
            count(self.failed)
        return self.values


def bounded_reward(
    func: Callable[..., Any],
    errors: str = "stop",
    timeout: float = 0.0,
    count: Callable[[int], None] | None = None,
) -> Callable[..., Any]:
    """Return `func` (TRL's reward signature, sync or async) with its failures handled as the module says."""
    check_reward_errors(errors)
    name = get_callable_name(func)  # TRL's name for it, kept on the wrapper for its metrics
    what = f"reward function {name!r}"
    wrapped = (_bounded_async if is_async_callable(func) else _bounded_sync)(func, what, errors, timeout, count)
    wrapped.__name__ = name  # a callable instance or a partial has no `__name__` for functools.wraps to copy
    return wrapped


def _bounded_sync(func: Callable, what: str, errors: str, timeout: float, count: Callable | None) -> Callable:
    def call(kwargs: dict[str, Any]) -> Any:
        try:
            return call_within(lambda: func(**kwargs), timeout, what)
        except TimeLimitExceeded:
            raise over_time(what, timeout, kwargs["completions"]) from None

    @functools.wraps(func)
    def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        fallback = _Fallback(what, errors, dict(prompts=prompts, completions=completions, **kwargs))
        try:
            return call(fallback.kwargs)
        except TrainingStopped:
            raise
        except Exception as error:
            batch_error = error
        for one in fallback.samples():
            try:
                fallback.values += call(one)
            except TrainingStopped:
                raise
            except Exception as error:
                fallback.failed_on(error)
        return fallback.result(batch_error, count)

    return wrapped


def _bounded_async(func: Callable, what: str, errors: str, timeout: float, count: Callable | None) -> Callable:
    async def call(kwargs: dict[str, Any]) -> Any:
        if timeout <= 0:
            return await func(**kwargs)
        try:
            return await asyncio.wait_for(func(**kwargs), timeout)
        except TimeoutError:
            raise over_time(what, timeout, kwargs["completions"]) from None

    @functools.wraps(func)
    async def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        fallback = _Fallback(what, errors, dict(prompts=prompts, completions=completions, **kwargs))
        try:
            return await call(fallback.kwargs)
        except TrainingStopped:
            raise
        except Exception as error:
            batch_error = error
        for one in fallback.samples():
            try:
                fallback.values += await call(one)
            except TrainingStopped:
                raise
            except Exception as error:
                fallback.failed_on(error)
        return fallback.result(batch_error, count)

    return wrapped
