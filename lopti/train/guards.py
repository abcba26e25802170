"""`TrainingGuard`: a run stops with one line instead of training on, or saving, a broken state.

- Divergence: after every optimizer step the trainable weights' norm must be finite and at most
  `max_weight_growth` (default `GROWTH_LIMIT`) × its value when training started; otherwise the run stops before
  the step's checkpoint is written (TRL would otherwise save the weights and die later in sampling with
  "probability tensor contains either inf, nan"). `max_weight_growth=None` switches this check off.
- Failing rewards: `explain_reward_errors` names the reward function and the first sample it raised on.
- Non-finite rewards and losses: a reward function returning nan or ±inf is reported with its name and the
  sample, its value becomes TRL's "no reward" (None), and every optimizer step trained on that generated
  batch is skipped; so is a step with a non-finite loss. Skipping drops the gradients before
  `optimizer.step()`, so Adam's momentum does not move the weights either (a zero loss would). After
  `max_nonfinite_losses` skipped steps in a row the run stops. Counts are logged per logging step as
  `lopti/nonfinite_rewards` and `lopti/nonfinite_losses`.
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from transformers import TrainerCallback
from trl.trainer.utils import get_callable_name, is_async_callable

from lopti.bounded import excerpt
from lopti.errors import TrainingStopped

logger = logging.getLogger(__name__)

# Legitimate RL updates change a pretrained model's weight norm by far less than this; a learning rate that
# is orders of magnitude too high multiplies it at once (1e6 on the tiny model: ×10⁷ in one step).
GROWTH_LIMIT = 10.0


def add_count(metrics: dict[str, list[float]], key: str, count: float) -> None:
    """Add `count` to the single value TRL's `log()` will average, so the logged value is the sum."""
    previous = metrics.get(key) or [0.0]
    metrics[key] = [previous[0] + count]


def one_sample(kwargs: dict[str, Any], index: int, size: int) -> dict[str, Any]:
    """Return a reward call's keyword arguments for one sample: each per-sample list cut to its `index`th entry."""
    return {k: v[index : index + 1] if isinstance(v, list) and len(v) == size else v for k, v in kwargs.items()}


def _reward_name(func: Any) -> str:
    return get_callable_name(func)  # TRL's: its metrics name each reward `rewards/<name>/...`


def is_python_reward(func: Any) -> bool:
    """Return True for a plain callable reward (not a reward-model name or module)."""
    return callable(func) and not isinstance(func, (str, torch.nn.Module))


def explain_reward_errors(
    func: Callable[..., list[float]], check: Callable[[str, list, list], list] | None = None
) -> Callable[..., list[float]]:
    """Return `func` wrapped so that an exception names the function and the first failing sample, and its
    values pass through `check(name, values, completions)` (the trainer's guard against nan and inf). An async
    reward stays a coroutine function, so that TRL still awaits it with the others; the wrapper keeps TRL's name."""
    if is_async_callable(func):
        return _named(_explain_async_reward_errors(func, check), func)

    @functools.wraps(func)
    def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float]:
        try:
            values = func(prompts=prompts, completions=completions, **kwargs)
        except TrainingStopped:  # already one line that names the function (`reward_calls.bounded_reward`)
            raise
        except Exception as error:
            for index in range(len(completions)):
                one = one_sample(kwargs, index, len(completions))
                try:
                    func(prompts=prompts[index : index + 1], completions=completions[index : index + 1], **one)
                except Exception as sample_error:
                    raise RuntimeError(
                        f"reward function {_reward_name(func)!r} raised on sample {index} of the batch "
                        f"({type(sample_error).__name__}: {sample_error})"
                    ) from error
            raise RuntimeError(f"reward function {_reward_name(func)!r} raised on the batch: {error}") from error
        return check(_reward_name(func), values, completions) if check and isinstance(values, list) else values

    return _named(wrapped, func)


def _named(wrapped: Callable, func: Any) -> Callable:
    """Return `wrapped` named as TRL names `func` (a callable instance or a partial has no `__name__` to copy)."""
    wrapped.__name__ = _reward_name(func)
    return wrapped


def _explain_async_reward_errors(func: Any, check: Callable[[str, list, list], list] | None) -> Callable:
    """Return `explain_reward_errors`'s wrapper for an async reward: a coroutine function awaiting `func`."""

    @functools.wraps(func)
    async def wrapped(*, prompts: list, completions: list, **kwargs: Any) -> list[float]:
        try:
            values = await func(prompts=prompts, completions=completions, **kwargs)
        except TrainingStopped:  # already one line that names the function (`reward_calls.bounded_reward`)
            raise
        except Exception as error:
            raise RuntimeError(f"reward function {_reward_name(func)!r} raised on the batch: {error}") from error
        return check(_reward_name(func), values, completions) if check and isinstance(values, list) else values

    return wrapped


def local_shard(parameter: torch.Tensor) -> torch.Tensor:
    """Return the part of `parameter` this process holds: DeepSpeed ZeRO-3's `ds_tensor`, FSDP2's local shard of a
    DTensor (a collective on a DTensor itself fails: "c10d.allreduce_ ... no sharding strategy"), else itself."""
    parameter = getattr(parameter, "ds_tensor", parameter)
    return parameter.to_local() if isinstance(parameter, DTensor) else parameter


class TrainingGuard(TrainerCallback):
    """Skips updates poisoned by non-finite rewards or losses and stops a diverging run (see the module)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.start_norm: float | None = None
        self.batch_problem: str | None = None  # the generated batch in use has non-finite rewards
        self.batch_step: int | None = None  # TRL's micro-step at which that batch was generated
        self.step_problem: str | None = None  # why the coming optimizer step must be skipped
        self.counts = torch.zeros(2)  # non-finite rewards, losses since the last optimizer step
        self.skipped_in_a_row = 0

    def note_rewards(self, name: str, values: list, completions: list) -> list:
        """Return a reward function's `values` with non-finite ones as None, reporting them (training: the
        steps on this batch are skipped)."""
        training = self.trainer.model.training
        if training and self.trainer._step != self.batch_step:  # the first reward of a new generated batch
            self.batch_step, self.batch_problem = self.trainer._step, None
        bad = [i for i, value in enumerate(values) if isinstance(value, numbers.Real) and not math.isfinite(value)]
        if not bad:
            return values
        problem = (
            f"reward function {name!r} returned {values[bad[0]]} for sample {bad[0]} of the batch "
            f"({len(bad)} of {len(values)} non-finite), completion {excerpt(completions[bad[0]])}"
        )
        logger.warning("lopti: %s; %s", problem, "updates on this batch are skipped" if training else "in evaluation")
        if training:
            self.batch_problem = problem
            self.counts[0] += len(bad)
        else:
            add_count(self.trainer._metrics["eval"], "lopti/nonfinite_rewards", len(bad))
        return [None if i in bad else value for i, value in enumerate(values)]

    def note_loss(self, loss: torch.Tensor) -> bool:
        """Return whether a micro-step's loss is finite; in training, mark the optimizer step to skip if not,
        or if its batch had non-finite rewards (the cause to report then)."""
        finite = bool(torch.isfinite(loss))
        if not self.trainer.model.training:
            if not finite:
                add_count(self.trainer._metrics["eval"], "lopti/nonfinite_losses", 1)
            return finite
        if not finite:
            self.counts[1] += 1
        if self.batch_problem:
            self.step_problem = f"{self.batch_problem}; fix the reward function"
        elif not finite:
            self.step_problem = (
                "the loss was not finite (log-probabilities, advantages or KL overflowed); "
                f"lower the learning rate ({self.trainer.args.learning_rate:g}) or check the rewards"
            )
        return finite

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        accelerator = self.trainer.accelerator
        # Every process must skip the same steps, or the replicas' weights drift apart.
        totals = torch.cat([self.counts, torch.tensor([float(self.step_problem is not None)])])
        totals = accelerator.reduce(totals.to(accelerator.device), "sum").tolist()
        metrics = self.trainer._metrics["train"]
        add_count(metrics, "lopti/nonfinite_rewards", totals[0])
        add_count(metrics, "lopti/nonfinite_losses", totals[1])
        problem = self.step_problem or "another process had non-finite rewards or losses"
        self.counts.zero_()
        self.step_problem = None
        if not totals[2]:
            self.skipped_in_a_row = 0
            return
        self.skipped_in_a_row += 1
        limit = args.max_nonfinite_losses
        deepspeed = self.trainer.is_deepspeed_enabled  # its engine applied the update inside backward() already
        if self.skipped_in_a_row >= limit or deepspeed:
            raise TrainingStopped(
                f"step {state.global_step + 1}: {self.skipped_in_a_row} poisoned update(s) in a row "
                f"(max_nonfinite_losses={limit}{', and DeepSpeed cannot skip one' if deepspeed else ''}); "
                f"last: {problem}"
            )
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                parameter.grad = None  # optimizer.step() then leaves the weights and Adam's moments alone
        logger.warning(
            "lopti: step %d skipped (%d of max_nonfinite_losses=%d in a row): %s",
            state.global_step + 1,
            self.skipped_in_a_row,
            limit,
            problem,
        )

    def weight_norm(self, model: torch.nn.Module) -> float:
        """Return the norm of the trainable weights this process holds, summed over processes (a constant
        factor when they are replicas, which the growth ratio cancels)."""
        squares = [
            torch.linalg.vector_norm(local_shard(p).detach(), dtype=torch.float32).square()
            for p in model.parameters()
            if p.requires_grad
        ]
        accelerator = self.trainer.accelerator
        total = torch.stack(squares).sum() if squares else torch.zeros((), device=accelerator.device)
        if accelerator.num_processes > 1:
            total = accelerator.reduce(total.to(accelerator.device), "sum")
        return math.sqrt(total.item())

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if args.max_weight_growth is not None:  # off: no norm is computed at all
            self.start_norm = self.weight_norm(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        limit = args.max_weight_growth
        if limit is None:
            return
        norm = self.weight_norm(model)
        if math.isfinite(norm) and (not self.start_norm or norm <= limit * self.start_norm):
            return
        change = f"grew from norm {self.start_norm:.3g} to {norm:.3g}" if math.isfinite(norm) else "became non-finite"
        raise TrainingStopped(
            f"step {state.global_step}: the weights {change} (max_weight_growth ×{limit:g}), so nothing from this "
            f"step was saved; the learning rate ({args.learning_rate:g}) is likely too high"
        )
