"""The `lopti` trainer mode: two actor updates per RL step, driven here by a stand-in worker group."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils.torch_functional import get_cosine_schedule_with_warmup

import lopti.integrations.verl.trainer as lopti_trainer
from lopti.integrations.verl.trainer import LoptiPPOTrainer, lopti_settings, scale_schedule

ETA = 0.5


class FakeTransferQueue:
    """verl's TransferQueue key-value calls, kept in a dict: one 1-D tensor per (key, field)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, torch.Tensor]] = {}

    def kv_batch_put(self, keys, partition_id, fields):
        for name, nested in fields.items():
            for key, row in zip(keys, nested.unbind(), strict=True):
                self.rows.setdefault(key, {})[name] = row.clone()
        every = sorted(set().union(*(self.rows[key] for key in keys)))
        return KVBatchMeta(keys=list(keys), tags=[{}] * len(keys), partition_id=partition_id, fields=every)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        names = select_fields or sorted(self.rows[keys[0]])
        return TensorDict(
            {n: torch.nested.as_nested_tensor([self.rows[k][n] for k in keys], layout=torch.jagged) for n in names},
            batch_size=len(keys),
        )


class StandInWorkerGroup:
    """The actor worker group: records what each `update_actor` call would train on, returns verl-style metrics."""

    def __init__(self, queue: FakeTransferQueue) -> None:
        self.queue = queue
        self.calls: list[dict[str, torch.Tensor]] = []

    def update_actor(self, batch: KVBatchMeta) -> dict:
        fetched = self.queue.kv_batch_get(batch.keys, batch.partition_id, batch.fields)  # what a worker would see
        self.calls.append({**fetched.to_padded_tensor().to_dict(), "extra_info": batch.extra_info})
        number = len(self.calls)
        return {"metrics": {"pg_loss": [10.0 * number, 10.0 * number + 2], "mfu": [0.1 * number], "lr": [1e-6]}}


@pytest.fixture
def rl_step(monkeypatch, recipe):
    """Return (trainer, queue, workers, batch, stored) for one RL step of 4 responses of lengths 5, 3, 6, 2."""

    def build(order: str = "low_first"):
        config = recipe("kk-qwen2.5-3b", [f"trainer.v1.lopti.order={order}"])
        trainer = LoptiPPOTrainer(config)
        queue = FakeTransferQueue()
        monkeypatch.setattr(lopti_trainer, "tq", queue)
        trainer.actor_rollout_wg = StandInWorkerGroup(queue)
        generator = torch.Generator().manual_seed(0)
        lengths = [5, 3, 6, 2]
        stored = {
            "response_mask": [torch.ones(n, dtype=torch.int64) for n in lengths],
            "old_log_probs": [-2.0 * torch.rand(n, generator=generator) for n in lengths],
            "advantages": [torch.full((n,), a) for n, a in zip(lengths, (1.5, -0.5, 0.8, -1.2), strict=True)],
            "input_ids": [torch.arange(n) for n in lengths],
        }
        keys = [f"uid{i}_0_0" for i in range(len(lengths))]
        queue.kv_batch_put(keys, "train", TensorDict({n: nest(v) for n, v in stored.items()}, batch_size=4))
        # the batch as verl's earlier stages leave it: its field list predates the Lopti phase mask
        batch = KVBatchMeta(keys=keys, tags=[{}] * 4, partition_id="train", fields=sorted(stored))
        return trainer, queue, trainer.actor_rollout_wg, batch, padded(stored)

    return build


def nest(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def padded(stored: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: torch.nn.utils.rnn.pad_sequence(rows, batch_first=True) for name, rows in stored.items()}


@pytest.mark.parametrize("order", ["low_first", "high_first"])
def test_update_trains_twice_on_the_phase_advantages_and_restores_them(rl_step, order):
    trainer, queue, workers, batch, stored = rl_step(order)
    metrics: dict = {}
    returned = trainer._update_actor(batch, metrics)

    valid = stored["response_mask"].bool()
    low = valid & (stored["old_log_probs"] < math.log(ETA))
    high = valid & ~low
    assert low.any() and high.any()
    expected_masks = (low, high) if order == "low_first" else (high, low)
    assert len(workers.calls) == 2
    for call, mask in zip(workers.calls, expected_masks, strict=True):
        torch.testing.assert_close(call["advantages"], stored["advantages"] * mask)
        torch.testing.assert_close(call["lopti_phase_mask"].bool(), mask)
        torch.testing.assert_close(call["old_log_probs"], stored["old_log_probs"])  # π_old not recomputed
        assert call["extra_info"]["mini_batch_size"] == 32 * 8  # verl's own update settings ride along

    after = queue.kv_batch_get(batch.keys, "train", ["advantages"]).to_padded_tensor()["advantages"]
    torch.testing.assert_close(after, stored["advantages"])
    assert returned is batch


def test_both_passes_keep_their_metrics_under_distinct_names(rl_step):
    trainer, _, _, batch, stored = rl_step("low_first")
    metrics: dict = {}
    trainer._update_actor(batch, metrics)
    assert metrics["lopti_low/actor/pg_loss"] == pytest.approx(11.0)  # pass 1: mean of [10, 12]
    assert metrics["lopti_high/actor/pg_loss"] == pytest.approx(21.0)
    assert metrics["lopti_low/perf/mfu/actor"] == pytest.approx(0.1)
    assert metrics["lopti_high/perf/mfu/actor"] == pytest.approx(0.2)
    valid = stored["response_mask"].bool()
    share = ((stored["old_log_probs"] < math.log(ETA)) & valid).sum() / valid.sum()
    assert metrics["lopti/low_token_share"] == pytest.approx(share.item())
    assert "actor/pg_loss" not in metrics


def test_advantages_are_restored_even_when_an_update_fails(rl_step):
    trainer, queue, workers, batch, stored = rl_step()

    def fail(_batch):
        raise RuntimeError("worker died")

    workers.update_actor = fail
    with pytest.raises(RuntimeError, match="worker died"):
        trainer._update_actor(batch, {})
    after = queue.kv_batch_get(batch.keys, "train", ["advantages"]).to_padded_tensor()["advantages"]
    torch.testing.assert_close(after, stored["advantages"])


def test_verl_sees_the_sync_data_path_and_the_phase_loss_is_installed(kk_config):
    trainer = LoptiPPOTrainer(kk_config)
    assert kk_config.trainer.v1.trainer_mode == "lopti"
    assert trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer).__name__ == "ReplayBuffer"  # verl's synchronous buffer

    installed = []
    trainer.actor_rollout_wg = type("Workers", (), {"set_loss_fn": lambda self, fn: installed.append(fn)})()
    trainer.checkpoint_manager = type("Sync", (), {"update_weights": lambda self, step: None})()
    trainer.global_steps = 0
    trainer.on_init_end()
    (loss_fn,) = installed
    assert loss_fn.func.__name__ == "lopti_ppo_loss"
    assert loss_fn.keywords["config"].use_kl_loss and not loss_fn.keywords["policy_config"].use_kl_loss


def test_schedule_lengths_double_so_warmup_and_decay_span_the_configured_rl_steps(monkeypatch, kk_config):
    rl_steps, warmup = 40, 6

    def verls_init_dataloader(self):  # what PPOTrainer._init_dataloader does to the optimizer config
        self.config.actor_rollout_ref.actor.optim.total_training_steps = rl_steps

    monkeypatch.setattr(PPOTrainer, "_init_dataloader", verls_init_dataloader)
    kk_config.actor_rollout_ref.actor.optim.lr_warmup_steps = warmup
    trainer = LoptiPPOTrainer(kk_config)
    trainer._init_dataloader()
    optim = trainer.config.actor_rollout_ref.actor.optim
    assert (optim.total_training_steps, optim.lr_warmup_steps) == (2 * rl_steps, 2 * warmup)

    def lrs(total, warm, updates_per_step):
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        schedule = get_cosine_schedule_with_warmup(optimizer, warm, total)
        seen = []
        for _ in range(rl_steps):
            seen.append(optimizer.param_groups[0]["lr"])
            for _ in range(updates_per_step):
                schedule.step()
        return seen

    # verl steps the scheduler once per actor update: twice per RL step under Lopti, once without
    assert lrs(optim.total_training_steps, optim.lr_warmup_steps, 2) == pytest.approx(lrs(rl_steps, warmup, 1))


def test_scale_schedule_leaves_unset_lengths_alone():
    optim = OmegaConf.create({"total_training_steps": 100, "lr_warmup_steps": -1, "lr_decay_steps": None, "lr": 1e-6})
    scale_schedule(optim, 2)
    assert OmegaConf.to_container(optim) == {
        "total_training_steps": 200,
        "lr_warmup_steps": -1,
        "lr_decay_steps": None,
        "lr": 1e-6,
    }


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.v1.lopti.eta=0", "trainer.v1.lopti.eta"),
        ("trainer.v1.lopti.eta=1.0", "trainer.v1.lopti.eta"),
        ("trainer.v1.lopti.eta=1.5", "trainer.v1.lopti.eta"),
        ("trainer.v1.lopti.eta=half", "trainer.v1.lopti.eta"),
        ("trainer.v1.lopti.order=middle_first", "trainer.v1.lopti.order"),
        ("trainer.v1.lopti.base_mode=colocate_async", "trainer.v1.lopti.base_mode"),
        ("trainer.v1.lopti.base_mode=separate_async", "trainer.v1.lopti.base_mode"),
        ("+trainer.v1.lopti.etta=0.4", "trainer.v1.lopti.etta"),
        ("distillation.enabled=true", "distillation.enabled"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(recipe, override, key):
    config = recipe("kk-qwen2.5-3b", [override])
    with pytest.raises(ValueError, match=key.replace(".", r"\.")) as raised:
        LoptiPPOTrainer(config)
    assert "\n" not in str(raised.value)


def test_settings_default_to_the_papers_when_the_section_is_absent(recipe):
    config = recipe("kk-qwen2.5-3b", ["~trainer.v1.lopti"])
    settings = lopti_settings(config)
    assert (settings.eta, settings.order, settings.base_mode, settings.groups) == (
        0.5,
        "low_first",
        "sync",
        ("low", "high"),
    )
