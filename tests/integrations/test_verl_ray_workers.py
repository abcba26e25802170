"""The `lopti` trainer mode's actor update on verl's real single controller, on CPU.

A local Ray (2 CPUs), the real TransferQueue, and verl's `RayWorkerGroup` of two data-parallel CPU actor
workers (`verl_actor.ActorWorker`) holding the tiny model. The trainer installs its phase loss on the
workers through `set_loss_fn`, writes each phase's advantages and mask to the queue and calls
`update_actor` with a `KVBatchMeta`; verl splits it over the ranks, each rank fetches its rows, computes
verl's `ppo_loss` (policy loss `lopti_ar`) on the model's log-probs and takes an AdamW step. The weights
are compared with the same updates computed directly from `lopti.core`'s objective in this process.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.utils.config import omega_conf_to_dataclass
from verl_actor import (
    ActorWorker,
    build_model,
    nest,
    response_log_probs,
    sample_rl_batch,
)

from lopti.core import aggregate_loss, token_objective
from lopti.integrations.verl.trainer import LoptiPPOTrainer

pytestmark = pytest.mark.slow  # starts Ray, the TransferQueue and two worker processes (about 40 s here)

WORKERS = 2
RL_STEPS = 2
# The K&K recipe, sized for 4 responses: one mini-batch per actor update (2 prompts × 2), a learning rate
# that moves the tiny model well past float noise, and a KL weight large enough that masking KL to the
# phase's tokens changes the weights measurably.
OVERRIDES = [
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.optim.lr=0.01",
    "actor_rollout_ref.actor.kl_loss_coef=0.5",
]


@pytest.fixture(scope="module")
def cluster():
    """Start a local Ray and the TransferQueue (its controller and one storage unit) for the module."""
    ray.init(
        # logical CPUs, for scheduling: the TransferQueue's controller and storage unit reserve one each
        # (hard-coded num_cpus=1) and each worker one; only the two workers compute
        num_cpus=4,
        include_dashboard=False,
        # the workers import verl_actor, which lives next to this file
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}},
    )
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def workers(cluster, recipe) -> RayWorkerGroup:
    """Return verl's worker group of two CPU actor workers, built as verl's own CPU tests build theirs."""
    actor = omega_conf_to_dataclass(recipe("kk-qwen2.5-3b", OVERRIDES).actor_rollout_ref.actor)
    return RayWorkerGroup(
        resource_pool=RayResourcePool([WORKERS], use_gpu=False, max_colocate_count=1),
        ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(ActorWorker), config=actor),
        name_prefix="lopti_actor",
    )


class WeightSyncRecorder:
    """verl's checkpoint manager as the trainer sees it at init: the weight sync to the rollout (none here)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def update_weights(self, global_steps: int) -> None:
        self.steps.append(global_steps)


def trainer_on(workers: RayWorkerGroup, config: DictConfig) -> LoptiPPOTrainer:
    """Return the `lopti` trainer driving `workers`, its phase loss installed on them by its own init hook."""
    workers.reset()
    trainer = LoptiPPOTrainer(config)
    trainer.actor_rollout_wg = workers
    trainer.checkpoint_manager = WeightSyncRecorder()
    trainer.global_steps = 0
    trainer.on_init_end()
    return trainer


def put_rl_step(rows: dict[str, list[torch.Tensor]], step: int) -> KVBatchMeta:
    """Write one RL step's rows to the TransferQueue; return the batch as verl's earlier stages leave it."""
    keys = [f"uid{step}_{i}_0" for i in range(len(rows["prompts"]))]
    fields = TensorDict({name: nest(values) for name, values in rows.items()}, batch_size=len(keys))
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=fields)


def padded(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)


@dataclasses.dataclass
class DirectActor:
    """The same actor updates computed in this process from lopti.core's objective, on the whole batch."""

    config: DictConfig

    def __post_init__(self) -> None:
        actor = self.config.actor_rollout_ref.actor
        self.temperature = self.config.actor_rollout_ref.rollout.temperature
        self.model = build_model()
        self.reference = build_model()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=actor.optim.lr,
            betas=tuple(actor.optim.betas),
            weight_decay=actor.optim.weight_decay,
        )

    def update(self, rows: dict[str, list[torch.Tensor]], phase: int, order: str) -> float:
        """Take Lopti phase `phase`'s optimizer step; return its policy-gradient loss (verl's `pg_loss`)."""
        actor, lopti = self.config.actor_rollout_ref.actor, self.config.trainer.v1.lopti
        self.optimizer.zero_grad()
        log_probs = response_log_probs(self.model, rows["prompts"], rows["responses"], self.temperature)
        terms = token_objective(
            log_probs,
            padded(rows["old_log_probs"]),
            padded(rows["advantages"]),
            padded(rows["response_mask"]).bool(),
            alpha=actor.policy_loss.ar_alpha,
            phase=phase,
            eta=lopti.eta,
            order=order,
            eps_low=actor.clip_ratio_low,
            eps_high=actor.clip_ratio_high,
            dual_clip=actor.clip_ratio_c,
            ref_logprobs=padded(rows["ref_log_prob"]),
            kl_estimator="k3",
        )
        loss = aggregate_loss(terms.policy + actor.kl_loss_coef * terms.kl, terms.counted, "token-mean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), actor.optim.clip_grad)
        self.optimizer.step()
        return aggregate_loss(terms.policy, terms.counted, "token-mean").item()

    def rl_step(self, step: int, order: str) -> tuple[dict[str, list[torch.Tensor]], list[float]]:
        """Sample a step's rows from the current weights, take both phases' updates; return rows and pg losses."""
        rows = sample_rl_batch(self.model, self.reference, self.temperature, seed=step)
        return rows, [self.update(rows, phase, order) for phase in (0, 1)]

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: value.detach().clone() for name, value in self.model.named_parameters()}


# Float noise, amplified by Adam where a gradient is zero in exact arithmetic (the attention key biases),
# stays below 0.5 % of one AdamW step (lr 0.01); the weights move by 4 steps, the other order 7 steps away.
WEIGHT_TOLERANCE = 5e-5


def largest_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    """Return the largest absolute difference between two sets of weights."""
    return max(float((first[name] - second[name]).abs().max()) for name in first)


@pytest.mark.parametrize("order", ["low_first", "high_first"])
def test_each_rl_step_makes_two_updates_in_order_and_the_weights_follow_lopti_core(workers, recipe, order):
    config = recipe("kk-qwen2.5-3b", [*OVERRIDES, f"trainer.v1.lopti.order={order}"])
    trainer = trainer_on(workers, config)
    assert trainer.checkpoint_manager.steps == [0]  # verl's init hook ran after the loss was installed
    direct = DirectActor(config)
    start = direct.weights()
    steps = []
    for step in range(RL_STEPS):
        # the rows are sampled from the direct model, equal (to float tolerance) to the workers' weights
        rows, pg_losses = direct.rl_step(step, order)
        steps.append(rows)
        batch = put_rl_step(rows, step)
        metrics: dict = {}
        assert trainer._update_actor(batch, metrics) is batch
        first, second = ("low", "high") if order == "low_first" else ("high", "low")
        assert metrics[f"lopti_{first}/actor/pg_loss"] == pytest.approx(pg_losses[0], rel=1e-4, abs=1e-7)
        assert metrics[f"lopti_{second}/actor/pg_loss"] == pytest.approx(pg_losses[1], rel=1e-4, abs=1e-7)
        assert f"lopti_{first}/perf/mfu/actor" in metrics and "actor/pg_loss" not in metrics  # both passes kept
        old = torch.cat(rows["old_log_probs"])
        low_share = (old < math.log(config.trainer.v1.lopti.eta)).float().mean().item()
        assert 0 < low_share < 1 and metrics["lopti/low_token_share"] == pytest.approx(low_share)
        # verl's data metrics read the original advantages back from the queue
        restored = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])
        torch.testing.assert_close(restored["advantages"].to_padded_tensor(0.0), padded(rows["advantages"]))
    assert_each_rank_saw_its_phases(workers.fetched(), steps, order, config.trainer.v1.lopti.eta)

    ranks = workers.weights()
    for weights in ranks:
        assert largest_difference(weights, direct.weights()) < WEIGHT_TOLERANCE
    assert largest_difference(ranks[0], start) > 0.03
    other = DirectActor(config)  # the other order reaches other weights: the check above tells them apart
    for step in range(RL_STEPS):
        other.rl_step(step, "high_first" if order == "low_first" else "low_first")
    assert largest_difference(ranks[0], other.weights()) > 0.03


def test_a_failing_update_on_the_workers_leaves_the_advantages_and_weights_as_they_were(workers, recipe):
    # a dual-clip constant below 1: the loss raises on the workers, at its first call
    config = recipe("kk-qwen2.5-3b", [*OVERRIDES, "actor_rollout_ref.actor.clip_ratio_c=0.5"])
    trainer = trainer_on(workers, config)
    before = workers.weights()[0]
    direct = DirectActor(config)
    rows = sample_rl_batch(direct.model, direct.reference, direct.temperature, seed=0)
    batch = put_rl_step(rows, step=RL_STEPS)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        trainer._update_actor(batch, {})
    restored = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])
    torch.testing.assert_close(restored["advantages"].to_padded_tensor(0.0), padded(rows["advantages"]))
    assert largest_difference(workers.weights()[0], before) == 0.0


def assert_each_rank_saw_its_phases(
    fetched: list[list[dict[str, torch.Tensor]]], steps: list[dict[str, list[torch.Tensor]]], order: str, eta: float
) -> None:
    """Check the `update_actor` calls each rank served: two per RL step, in `order`, on its share of the rows."""
    assert len(fetched) == WORKERS
    share = len(steps[0]["prompts"]) // WORKERS
    for rank, calls in enumerate(fetched):
        assert len(calls) == 2 * len(steps)
        for number, call in enumerate(calls):
            mine = slice(rank * share, (rank + 1) * share)  # verl hands each rank a contiguous chunk
            rows = {name: padded(values[mine]) for name, values in steps[number // 2].items()}
            low = rows["response_mask"].bool() & (rows["old_log_probs"] < math.log(eta))
            group = ("low", "high")[(number % 2) ^ (order == "high_first")]
            mask = low if group == "low" else rows["response_mask"].bool() & ~low
            assert mask.any()
            torch.testing.assert_close(call["lopti_phase_mask"].bool(), mask)
            torch.testing.assert_close(call["advantages"], rows["advantages"] * mask)
            torch.testing.assert_close(call["old_log_probs"], rows["old_log_probs"])  # π_old not recomputed
