"""Update quality during training: how an RL step's update moved the log-probabilities of its own batch.

The probe (`lopti analyze`) asks this of one update from a fixed model; here it is asked of the run
itself, every `update_quality_every`-th RL step (generated batch), after the step's last optimizer step:
per π_old bucket, the share of tokens with Â > 0 whose log π rose and of tokens with Â < 0 whose log π
fell (the paper's "correct ratio", docs/paper.md §9), and their mean Δ log π. With Lopti the same is measured
after phase 1 alone (quality/phase1/...), which shows what phase 2 starts from.

π_old is what the loss used: TRL's `old_per_token_logps`, or, when TRL skips them (one optimizer step per
generated batch), the loss pass's own log-probs, which are then at π_old. The new log π costs one forward
pass without gradients over the first pass's micro-batches.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback
from trl.models.utils import disable_gradient_checkpointing

from lopti.core.buckets import bucket_labels, probability_buckets, update_sums

FINAL, PHASE1 = "quality/", "quality/phase1/"


def quality_metrics(sums: torch.Tensor, labels: list[str], prefix: str) -> dict[str, float]:
    """Return the named metrics of `update_sums` rows per bucket, plus "all"; a sign absent in a bucket logs nothing."""
    columns = torch.cat([sums, sums.sum(dim=1, keepdim=True)], dim=1)
    metrics = {}
    for k, label in enumerate([*labels, "all"]):
        positive, rose, dlogp_positive, negative, fell, dlogp_negative = columns[:, k].tolist()
        sides = (("pos", positive, rose, dlogp_positive), ("neg", negative, fell, dlogp_negative))
        for sign, count, right, delta in sides:
            if count > 0:
                metrics[f"{prefix}correct_{sign}_{label}"] = right / count
                metrics[f"{prefix}dlogp_{sign}_{label}"] = delta / count
    return metrics


class UpdateQuality(TrainerCallback):
    """Collects the measured RL step's micro-batches and π_old; measures after the update (a Trainer callback).

    The trainer calls `after_micro_step` after each micro-step; `on_step_end` runs after each optimizer step,
    before the Trainer logs, so the metrics land in the same log line as the step's other metrics.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.batches: list[tuple[dict[str, Any], torch.Tensor]] = []  # (micro-batch, its π_old log-probs)
        self.due: str | None = None  # the metric prefix to measure at the end of the next optimizer step

    def after_micro_step(self, inputs: dict[str, Any], training_logps: torch.Tensor | None) -> None:
        """Keep the micro-batch if its RL step is measured, and mark a measurement after each measured pass."""
        trainer, args = self.trainer, self.trainer.args
        per_pass = args.steps_per_generation
        rl_step, position = divmod(trainer._step - 1, per_pass * trainer.num_iterations)  # _step counts this one
        if (rl_step + 1) % args.update_quality_every:
            return
        if position < per_pass:
            old = inputs.get("old_per_token_logps")
            self.batches.append((inputs, training_logps if old is None else old))
        if position == per_pass - 1 and args.lopti:
            self.due = PHASE1
        if position == per_pass * trainer.num_iterations - 1:
            self.due = FINAL

    def on_step_end(self, args, state, control, **kwargs):
        if self.due is None:
            return
        trainer = self.trainer
        labels = bucket_labels(args.probability_buckets)
        sums = sum(self._sums(inputs, old, args.probability_buckets, len(labels)) for inputs, old in self.batches)
        sums = trainer.accelerator.gather(sums.unsqueeze(0)).sum(dim=0)
        for name, value in quality_metrics(sums, labels, self.due).items():
            trainer._metrics["train"][name].append(value)
        if self.due == FINAL:
            self.batches = []
        self.due = None

    def _sums(self, inputs: dict[str, Any], old: torch.Tensor, edges: list[float], buckets: int) -> torch.Tensor:
        """Return `update_sums` of one micro-batch: one forward pass, without gradients, at the updated weights."""
        trainer = self.trainer
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        # as TRL takes its own log-probs without gradients: checkpointing has nothing to save there. The model gets
        # the loss forward's inputs (a vision-language model its images), so that log π is the loss's log π.
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
            new, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
                torch.cat([inputs["prompt_mask"], completion_mask], dim=1),
                completion_ids.size(1),
                **trainer.extra_forward_inputs(inputs),
            )
        if not mask.any():  # every response truncated (mask_truncated_completions): no token to measure
            return torch.zeros(6, buckets, dtype=torch.float64, device=new.device)
        advantages = inputs["advantages"]
        advantages = advantages[:, None].expand_as(new) if advantages.dim() == 1 else advantages
        index = probability_buckets(old, mask, edges)
        return update_sums(index, (new - old).double(), advantages, buckets)
