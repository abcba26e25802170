"""The Lopti actor loss: verl's ppo_loss, with KL and entropy counted on the phase's tokens only."""

import pickle

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.utils.losses import ppo_loss

from lopti.core import aggregate_loss, clipped_policy_loss, kl_penalty, reweight_advantages
from lopti.integrations.verl.phase_loss import PHASE_MASK, phase_loss_fn

PROMPTS, RESPONSES = [3, 2, 4], [5, 3, 6]
KL_COEF, ENTROPY_COEF, ALPHA = 0.05, 0.01, 0.3


def nest(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def pad(rows):
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)


@pytest.fixture
def actor(kk_config):
    """verl's actor config of the K&K recipe, with a KL loss and an entropy bonus."""
    from verl.utils.config import omega_conf_to_dataclass

    kk_config.actor_rollout_ref.actor.kl_loss_coef = KL_COEF
    kk_config.actor_rollout_ref.actor.entropy_coeff = ENTROPY_COEF
    return omega_conf_to_dataclass(kk_config.actor_rollout_ref.actor)


def micro_batch(phase_rows=None, seed=0):
    """Return (model_output, data) as verl's engine hands them to the loss: nested, prompt + response."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    log_probs = nest([-3.0 * torch.rand(n, generator=generator) for n in lengths]).requires_grad_()
    entropy = nest([2.0 * torch.rand(n, generator=generator) for n in lengths]).requires_grad_()
    fields = {
        "prompts": nest([torch.arange(p) + 1 for p in PROMPTS]),
        "responses": nest([torch.arange(r) + 1 for r in RESPONSES]),
        "response_mask": nest([torch.ones(r, dtype=torch.int64) for r in RESPONSES]),
        "old_log_probs": nest([-3.0 * torch.rand(r, generator=generator) for r in RESPONSES]),
        "ref_log_prob": nest([-3.0 * torch.rand(r, generator=generator) for r in RESPONSES]),
        "advantages": nest([torch.full((r,), a) for r, a in zip(RESPONSES, (1.0, -0.7, 0.4), strict=True)]),
    }
    if phase_rows is not None:
        fields[PHASE_MASK] = nest(phase_rows)
    data = TensorDict(fields, batch_size=len(RESPONSES))
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=sum(RESPONSES), global_batch_size=len(RESPONSES))
    return {"log_probs": log_probs, "entropy": entropy}, data


def response_part(nested: torch.Tensor) -> torch.Tensor:
    """Return the (B, T) response values of a prompt + response tensor (shifted left by one, as verl does)."""
    rows = [row[p - 1 : p - 1 + r] for row, p, r in zip(nested.unbind(), PROMPTS, RESPONSES, strict=True)]
    return pad(rows)


def phase_rows(seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(r, generator=generator) < 0.4 for r in RESPONSES]


def test_kl_and_entropy_count_only_the_phase_tokens(actor):
    rows = phase_rows()
    model_output, data = micro_batch([r.float() for r in rows])
    loss, metrics = phase_loss_fn(actor)(model_output=model_output, data=data)

    # the same loss from lopti.core, reduced over all response tokens (verl's token-mean denominator)
    log_prob, entropy = response_part(model_output["log_probs"]), response_part(model_output["entropy"])
    old, ref, adv = (pad(list(data[k].unbind())) for k in ("old_log_probs", "ref_log_prob", "advantages"))
    mask, phase = pad([torch.ones(r, dtype=torch.bool) for r in RESPONSES]), pad(rows)
    per_token, _ = clipped_policy_loss(log_prob, old, reweight_advantages(adv, old, ALPHA), mask, 0.2, 0.24, 10.0)
    per_token = per_token + KL_COEF * kl_penalty(log_prob, ref, "k3", mask=phase) - ENTROPY_COEF * entropy * phase
    expected = aggregate_loss(per_token, mask, "token-mean")

    torch.testing.assert_close(loss, expected)
    grads = torch.autograd.grad(loss, [model_output["log_probs"], model_output["entropy"]])
    expected_grads = torch.autograd.grad(expected, [model_output["log_probs"], model_output["entropy"]])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got.values(), want.values())
    assert metrics["kl_coef"] == KL_COEF
    assert metrics["kl_loss"].aggregate() == pytest.approx(
        float(aggregate_loss(kl_penalty(log_prob, ref, "k3", mask=phase), mask))
    )


def test_over_both_phases_each_token_gets_its_kl_once(actor):
    rows = phase_rows()
    loss_fn = phase_loss_fn(actor)
    kl = []
    for phase in (rows, [~r for r in rows]):
        model_output, data = micro_batch([r.float() for r in phase])
        kl.append(loss_fn(model_output=model_output, data=data)[1]["kl_loss"].aggregate())
    model_output, data = micro_batch()
    unmasked = ppo_loss(actor, model_output, data)[1]["kl_loss"].aggregate()
    assert kl[0] + kl[1] == pytest.approx(unmasked)
    assert 0 < kl[0] < unmasked


def test_without_a_phase_mask_it_is_verls_ppo_loss(actor):
    model_output, data = micro_batch()
    ours = phase_loss_fn(actor)(model_output=model_output, data=data)[0]
    model_output, data = micro_batch()
    torch.testing.assert_close(ours, ppo_loss(actor, model_output, data)[0])


def test_with_an_all_ones_phase_mask_it_is_verls_ppo_loss(actor):
    # a full phase masks nothing: the regularisers must then be exactly verl's
    model_output, data = micro_batch([torch.ones(r) for r in RESPONSES])
    ours = phase_loss_fn(actor)(model_output=model_output, data=data)[0]
    model_output, data = micro_batch()
    torch.testing.assert_close(ours, ppo_loss(actor, model_output, data)[0])


def test_the_loss_function_survives_the_trip_to_the_workers(actor):
    # set_loss_fn pickles the function to every Ray worker
    loss_fn = pickle.loads(pickle.dumps(phase_loss_fn(actor)))
    model_output, data = micro_batch([r.float() for r in phase_rows()])
    expected = phase_loss_fn(actor)(model_output=model_output, data=data)[0]
    model_output, data = micro_batch([r.float() for r in phase_rows()])
    torch.testing.assert_close(loss_fn(model_output=model_output, data=data)[0], expected)
