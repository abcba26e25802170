"""`lopti_ar` through verl's `ppo_loss` under FSDP2: two gloo processes, the tiny model sharded by `fully_shard`.

Each rank takes half of an RL-step batch and verl's global token count; FSDP2's reduce-scatter averages the
gradients over the ranks. The unsharded gradients must equal the single-process gradients of the whole
batch, which must in turn equal lopti.core's objective's.
"""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss
from verl_actor import build_model, nested_log_probs, response_log_probs, sample_rl_batch, sharded_gradients, verl_batch

from lopti.core import aggregate_loss, token_objective

pytestmark = pytest.mark.slow  # spawns two processes that import verl (about 30 s here)

WORLD_SIZE = 2


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: parameter.grad.clone() for name, parameter in model.named_parameters()}


def test_fsdp2_gradients_equal_one_process_and_lopti_core(kk_config, tmp_path):
    actor = omega_conf_to_dataclass(kk_config.actor_rollout_ref.actor)
    model = build_model()
    rows = sample_rl_batch(model, model, temperature=1.0, seed=0)
    # as after some updates, π_θ ≠ π_old ≠ π_ref: ratios leave the clip range and the KL term has a gradient
    rows["old_log_probs"] = [row * 1.3 for row in rows["old_log_probs"]]
    rows["ref_log_prob"] = [row * 0.8 for row in rows["ref_log_prob"]]
    out_file = tmp_path / "gradients.pt"
    mp.spawn(
        sharded_gradients,
        args=(WORLD_SIZE, str(tmp_path / "rendezvous"), str(out_file), actor, rows),
        nprocs=WORLD_SIZE,
    )
    sharded = torch.load(out_file)

    total_tokens = sum(len(row) for row in rows["responses"])
    data = verl_batch(rows, 1, total_tokens, len(rows["prompts"]))
    single = build_model()
    loss, _ = ppo_loss(actor, {"log_probs": nested_log_probs(single, data["input_ids"], 1.0)}, data)
    loss.backward()
    one_process = gradients(single)

    direct = build_model()
    padded = {name: torch.nn.utils.rnn.pad_sequence(values, batch_first=True) for name, values in rows.items()}
    terms = token_objective(
        response_log_probs(direct, rows["prompts"], rows["responses"], 1.0),
        padded["old_log_probs"],
        padded["advantages"],
        padded["response_mask"].bool(),
        alpha=actor.policy_loss.ar_alpha,
        eps_low=actor.clip_ratio_low,
        eps_high=actor.clip_ratio_high,
        dual_clip=actor.clip_ratio_c,
        ref_logprobs=padded["ref_log_prob"],
    )
    aggregate_loss(terms.policy + actor.kl_loss_coef * terms.kl, terms.counted, "token-mean").backward()
    lopti_core = gradients(direct)

    assert sharded.keys() == one_process.keys()
    for name, gradient in one_process.items():
        torch.testing.assert_close(sharded[name], gradient, rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
        torch.testing.assert_close(lopti_core[name], gradient, rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    assert max(float(gradient.abs().max()) for gradient in one_process.values()) > 1e-3
