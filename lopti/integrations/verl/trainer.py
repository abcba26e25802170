"""Lopti as a verl v1 trainer mode, `trainer.v1.trainer_mode=lopti` (docs/paper.md §5; docs/guides/verl.md).

verl's synchronous trainer, with one change to the RL step: the actor update runs twice on the same
batch. The response tokens are split once by π_old (verl's `old_log_probs`, computed once per step at
the rollout temperature and not recomputed between the passes): phase 1 updates on the low-probability
tokens (π_old < η), phase 2, from the updated weights, on the rest (`order: high_first` swaps them).
Each phase zeroes the advantages outside its group, so every loss denominator still counts all response
tokens, and writes its token mask for the actor loss (`phase_loss`), which masks KL and entropy to it.
The original advantages are put back afterwards.

Settings, under `trainer.v1.lopti` (verl keeps each mode's settings under `trainer.v1.<mode>`):
eta (0.5), order (low_first) and base_mode (sync: the verl mode whose data path Lopti runs on; the
asynchronous modes are not supported).

LR schedule: verl steps the actor's LR scheduler once per actor update (at the last mini-batch of
`train_mini_batch`), so twice per RL step under Lopti. The schedule's lengths are given in RL steps by the
user (and by verl's `total_training_steps`); this trainer doubles them, so a warm-up of k steps, a warm-up
ratio and a cosine decay span the same RL steps as they would without Lopti.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import transfer_queue as tq
from omegaconf import DictConfig, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.distillation import is_distillation_enabled
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.padding import response_to_nested

from lopti.core import ORDERS, isolate_advantages, phase_masks
from lopti.core.constants import LOPTI_ETA
from lopti.integrations.verl.ar import LOSS_MODE, ar_alpha_of
from lopti.integrations.verl.phase_loss import PHASE_MASK, phase_loss_fn

TRAINER_MODE = "lopti"
SETTINGS_KEY = f"trainer.v1.{TRAINER_MODE}"
SUPPORTED_BASE_MODES = ("sync",)
# Optimizer schedule lengths, counted in RL steps by the user, that verl's scheduler counts in updates.
SCHEDULE_LENGTHS = ("total_training_steps", "lr_warmup_steps", "lr_decay_steps", "lr_wsd_decay_steps")
UPDATES_PER_STEP = 2


@dataclasses.dataclass(frozen=True)
class LoptiSettings:
    """The Lopti trainer's settings (`trainer.v1.lopti.*`)."""

    eta: float = LOPTI_ETA
    order: str = "low_first"
    base_mode: str = "sync"

    @property
    def groups(self) -> tuple[str, str]:
        """Return the token groups in the order the two passes update them."""
        return ("low", "high") if self.order == "low_first" else ("high", "low")


def lopti_settings(config: DictConfig) -> LoptiSettings:
    """Return the Lopti settings of a verl config, raising a one-line ValueError naming a bad key."""
    given = dict(config.trainer.v1.get(TRAINER_MODE) or {})
    known = {field.name for field in dataclasses.fields(LoptiSettings)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"{SETTINGS_KEY}.{unknown[0]} is not a Lopti setting; use one of {sorted(known)}")
    settings = LoptiSettings(**given)
    if not (isinstance(settings.eta, int | float) and 0.0 < settings.eta < 1.0):
        raise ValueError(f"{SETTINGS_KEY}.eta must be a number in (0, 1), got {settings.eta!r}")
    if settings.order not in ORDERS:
        raise ValueError(f"{SETTINGS_KEY}.order must be one of {ORDERS}, got {settings.order!r}")
    if settings.base_mode not in SUPPORTED_BASE_MODES:
        raise ValueError(
            f"{SETTINGS_KEY}.base_mode={settings.base_mode!r} is not supported: Lopti runs two update passes on "
            f"one synchronous RL-step batch; use one of {SUPPORTED_BASE_MODES}"
        )
    actor = config.actor_rollout_ref.actor
    if actor.policy_loss.get("loss_mode") == LOSS_MODE:  # here, not at the workers' first loss call
        ar_alpha_of(actor)
    if is_distillation_enabled(config.get("distillation")):
        raise ValueError(
            f"distillation.enabled=True is not supported with trainer.v1.trainer_mode={TRAINER_MODE}: "
            "Lopti replaces the actor loss, which distillation replaces too"
        )
    return settings


def scale_schedule(optim: DictConfig, factor: int) -> None:
    """Multiply every positive schedule length of an optimizer config by `factor`, in place."""
    with open_dict(optim):
        for key in SCHEDULE_LENGTHS:
            value = optim.get(key)
            if value is not None and value > 0:
                optim[key] = value * factor


@register_trainer(TRAINER_MODE)
class LoptiPPOTrainer(PPOTrainerSync):
    """verl's synchronous PPO trainer whose actor update is Lopti's two passes."""

    def __init__(self, config: DictConfig) -> None:
        self.lopti = lopti_settings(config)  # first: the base class reads trainer_mode below
        super().__init__(config)

    # verl chooses its data path (replay buffer, dataloader refill, checkpointed queue) by comparing
    # trainer_mode with "sync"; Lopti changes only the actor update, so it reports the base mode.
    @property
    def trainer_mode(self) -> str:
        """Return the verl mode whose data path Lopti runs on (`trainer.v1.lopti.base_mode`)."""
        return self.lopti.base_mode

    @trainer_mode.setter
    def trainer_mode(self, registered_name: str) -> None:
        """Accept verl's assignment of the registered name ("lopti"), which the getter replaces."""

    def _init_dataloader(self) -> None:
        """Build verl's dataloaders, then count the actor's schedule in actor updates (two per RL step)."""
        super()._init_dataloader()  # sets the optimizer's total_training_steps from the data
        scale_schedule(self.config.actor_rollout_ref.actor.optim, UPDATES_PER_STEP)

    def on_init_end(self) -> None:
        """Install the phase-masked actor loss on every actor worker, then sync weights as verl's sync trainer."""
        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(phase_loss_fn(actor_config))
        super().on_init_end()

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Run verl's actor update once per Lopti phase; return `batch` with its advantages as they were."""
        stored = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["response_mask", "old_log_probs", "advantages"],
        )
        response_mask = stored["response_mask"]
        padded = stored.to_padded_tensor()
        valid = padded["response_mask"].bool()
        masks = phase_masks(padded["old_log_probs"], valid, self.lopti.eta, self.lopti.order)
        try:
            for group, mask in zip(self.lopti.groups, masks, strict=True):
                phase_fields = {
                    "advantages": isolate_advantages(padded["advantages"], mask),
                    PHASE_MASK: mask.to(padded["advantages"].dtype),
                }
                written = tq.kv_batch_put(
                    keys=batch.keys,
                    partition_id=batch.partition_id,
                    fields=_nested(phase_fields, response_mask, len(batch)),
                )
                # the workers fetch the fields the batch lists: add the phase mask to them
                phase_metrics: dict[str, Any] = {}
                super()._update_actor(dataclasses.replace(batch, fields=written.fields), phase_metrics)
                metrics.update({f"lopti_{group}/{name}": value for name, value in phase_metrics.items()})
        finally:
            original = TensorDict({"advantages": stored["advantages"]}, batch_size=len(batch))
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=original)
        low = masks[self.lopti.groups.index("low")]
        metrics["lopti/low_token_share"] = (low.sum() / valid.sum()).item()
        return batch


def _nested(fields: dict[str, torch.Tensor], response_mask: torch.Tensor, batch_size: int) -> TensorDict:
    """Return padded (B, T) response fields in the transfer queue's nested layout."""
    return TensorDict(
        {name: response_to_nested(value, response_mask) for name, value in fields.items()}, batch_size=batch_size
    )
