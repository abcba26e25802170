"""The `lopti` trainer mode's settings and LR schedule; its actor update runs in test_verl_ray_workers.py."""

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils.torch_functional import get_cosine_schedule_with_warmup

from lopti.integrations.verl.trainer import LoptiPPOTrainer, lopti_settings, scale_schedule


def test_verl_sees_the_sync_data_path(kk_config):
    trainer = LoptiPPOTrainer(kk_config)
    assert kk_config.trainer.v1.trainer_mode == "lopti"
    assert trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer).__name__ == "ReplayBuffer"  # verl's synchronous buffer


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
        ("~actor_rollout_ref.actor.policy_loss.ar_alpha", "ARPolicyLossConfig, which carries ar_alpha"),
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
