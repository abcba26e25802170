"""The `lopti_ar` policy loss equals lopti.core's AR surrogate, and verl's vanilla loss at α = 0."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from lopti.core import aggregate_loss, clipped_policy_loss, reweight_advantages
from lopti.integrations.verl.ar import ARPolicyLossConfig

AR_TARGET = "lopti.integrations.verl.ar.ARPolicyLossConfig"


def actor_config(alpha: float | None, clip_ratio_c: float = 10.0, loss_mode: str = "lopti_ar", **actor):
    """Return verl's FSDP actor config built the way verl's workers build it (Hydra instantiate)."""
    if alpha is None:
        policy_loss = {"_target_": "verl.workers.config.PolicyLossConfig", "loss_mode": loss_mode}
    else:
        policy_loss = {"_target_": AR_TARGET, "loss_mode": loss_mode, "ar_alpha": alpha}
    fields = {
        "_target_": "verl.workers.config.FSDPActorConfig",
        "strategy": "fsdp",
        "rollout_n": 8,
        "ppo_micro_batch_size_per_gpu": 2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.24,
        "clip_ratio_c": clip_ratio_c,
        "policy_loss": policy_loss,
        **actor,
    }
    return omega_conf_to_dataclass(OmegaConf.create(fields))


def padded_batch(seed: int, batch: int = 6, length: int = 9):
    """Return (old_log_prob, log_prob, advantages, mask): ragged responses, some ratios far past the clips."""
    generator = torch.Generator().manual_seed(seed)
    old = -4.0 * torch.rand(batch, length, generator=generator)
    drift = 0.6 * torch.randn(batch, length, generator=generator)
    drift[0, :3] = torch.tensor([3.0, 2.5, -2.0])  # ratios ≈ 20, 12, 0.14: dual clip and both clips bite
    log_prob = (old + drift).requires_grad_()
    advantages = torch.randn(batch, 1, generator=generator).expand(batch, length).clone()
    advantages[0] = -1.0
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return old, log_prob, advantages, mask


def loss_and_grad(loss_mode, config, old, log_prob, advantages, mask, agg="token-mean", weights=None):
    loss, metrics = get_policy_loss_fn(loss_mode)(old, log_prob, advantages, mask, agg, config, weights)
    (grad,) = torch.autograd.grad(loss, log_prob)
    return loss.detach(), grad, metrics


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("clip_ratio_c", [10.0, math.inf])
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_and_gradient_equal_lopti_core(alpha, clip_ratio_c, seed):
    old, log_prob, advantages, mask = padded_batch(seed)
    got, got_grad, metrics = loss_and_grad(
        "lopti_ar", actor_config(alpha, clip_ratio_c), old, log_prob, advantages, mask
    )

    dual_clip = None if math.isinf(clip_ratio_c) else clip_ratio_c
    weighted = reweight_advantages(advantages, old, alpha)
    per_token, _ = clipped_policy_loss(log_prob, old, weighted, mask, 0.2, 0.24, dual_clip)
    expected = aggregate_loss(per_token, mask, "token-mean")
    (expected_grad,) = torch.autograd.grad(expected, log_prob)

    torch.testing.assert_close(got, expected.detach())
    torch.testing.assert_close(got_grad, expected_grad)
    assert metrics["actor/ar_weight_mean"] == pytest.approx(float((alpha * old.exp() + 1 - alpha)[mask].mean()))


def test_dual_clip_caps_the_loss_of_a_huge_ratio_on_a_negative_advantage():
    old, log_prob, advantages, mask = padded_batch(0)
    capped, _, metrics = loss_and_grad("lopti_ar", actor_config(0.3, 10.0), old, log_prob, advantages, mask)
    uncapped, _, _ = loss_and_grad("lopti_ar", actor_config(0.3, math.inf), old, log_prob, advantages, mask)
    beyond_c = ((log_prob - old).exp() > 10.0) & (advantages < 0) & mask
    assert beyond_c.sum() == 2  # ratios e³ ≈ 20 and e^2.5 ≈ 12 on row 0, whose advantage is negative
    assert capped < uncapped
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(2 / mask.sum().item())


def test_uses_verls_global_token_count_for_data_parallel_normalisation():
    old, log_prob, advantages, mask = padded_batch(1)
    config = actor_config(0.3)
    config.global_batch_info.update(dp_size=4, batch_num_tokens=200)
    got, got_grad, _ = loss_and_grad("lopti_ar", config, old, log_prob, advantages, mask)

    per_token, _ = clipped_policy_loss(log_prob, old, reweight_advantages(advantages, old, 0.3), mask, 0.2, 0.24, 10.0)
    expected = aggregate_loss(per_token, mask, "token-mean", num_tokens=200 / 4)
    (expected_grad,) = torch.autograd.grad(expected, log_prob)
    torch.testing.assert_close(got, expected.detach())
    torch.testing.assert_close(got_grad, expected_grad)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("clip_ratio_c", [3.0, 10.0, math.inf])
@pytest.mark.parametrize("with_is_weights", [False, True])
def test_alpha_zero_equals_verls_vanilla_loss(agg, clip_ratio_c, with_is_weights):
    old, log_prob, advantages, mask = padded_batch(2)
    weights = torch.rand(mask.shape, generator=torch.Generator().manual_seed(5)) if with_is_weights else None
    ours = loss_and_grad("lopti_ar", actor_config(0.0, clip_ratio_c), old, log_prob, advantages, mask, agg, weights)
    verls = loss_and_grad(
        "vanilla", actor_config(None, clip_ratio_c, "vanilla"), old, log_prob, advantages, mask, agg, weights
    )
    torch.testing.assert_close(ours[0], verls[0])
    torch.testing.assert_close(ours[1], verls[1])
    for name in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        assert ours[2][name] == pytest.approx(verls[2][name], abs=1e-6), name


def test_alpha_scales_the_gradient_of_low_probability_tokens_down():
    old, log_prob, advantages, mask = padded_batch(3)
    _, plain, _ = loss_and_grad("lopti_ar", actor_config(0.0), old, log_prob, advantages, mask)
    _, reweighted, _ = loss_and_grad("lopti_ar", actor_config(0.3), old, log_prob, advantages, mask)
    unclipped = plain != 0
    torch.testing.assert_close(reweighted[unclipped] / plain[unclipped], (0.3 * old.exp() + 0.7)[unclipped])


def test_an_all_padding_micro_batch_gives_a_zero_loss_without_gradient():
    old, log_prob, advantages, mask = padded_batch(4)
    loss, grad, _ = loss_and_grad("lopti_ar", actor_config(0.3), old, log_prob, advantages, torch.zeros_like(mask))
    assert loss.item() == 0.0 and not grad.any()


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: ARPolicyLossConfig(loss_mode="gspo", ar_alpha=0.3), "actor_rollout_ref.actor.policy_loss.loss_mode"),
        (lambda: actor_config(0.3, loss_mode="vanilla"), "actor_rollout_ref.actor.policy_loss.loss_mode"),
        (lambda: ARPolicyLossConfig(ar_alpha=1.5), "actor_rollout_ref.actor.policy_loss.ar_alpha"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(build, key):
    with pytest.raises(Exception, match=key) as raised:
        build()
    message = str(raised.value.__cause__ or raised.value)  # Hydra wraps errors raised inside instantiate
    assert isinstance(raised.value.__cause__ or raised.value, ValueError)
    assert "\n" not in message and key in message


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (lambda: actor_config(None, loss_mode="lopti_ar"), "actor_rollout_ref.actor.policy_loss._target_"),
        (lambda: actor_config(0.3, clip_ratio_c=1.0), "actor_rollout_ref.actor.clip_ratio_c"),
    ],
)
def test_a_loss_without_alpha_or_without_a_valid_dual_clip_names_the_key(config, key):
    old, log_prob, advantages, mask = padded_batch(0)
    with pytest.raises(ValueError, match=key) as raised:
        get_policy_loss_fn("lopti_ar")(old, log_prob, advantages, mask, "token-mean", config(), None)
    assert "\n" not in str(raised.value)
