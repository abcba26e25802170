"""The actor loss of a Lopti update: verl's `ppo_loss` with KL and entropy on the phase's tokens only.

verl's `ppo_loss` adds the KL and entropy terms over every response token. Lopti (docs/paper.md §5) masks
them to the active token group of each phase, so that every token gets its KL penalty exactly once over
the two passes. The Lopti trainer writes the phase's token mask to the batch as `lopti_phase_mask`;
this loss reads it, lets verl compute the policy-gradient part (with whatever policy loss is
configured, `lopti_ar` included), and adds the two regularisers itself, multiplied by the mask and
reduced by verl's `agg_loss` over all response tokens, so the denominators stay verl's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.utils.metric import Metric
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

PHASE_MASK = "lopti_phase_mask"


def lopti_ppo_loss(
    config: ActorConfig,
    model_output: dict[str, Any],
    data: TensorDict,
    dp_group: Any = None,
    *,
    policy_config: ActorConfig,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Return (loss, metrics) as verl's `ppo_loss`, with KL and entropy counted on the phase's tokens.

    `policy_config` is `config` with the KL loss and the entropy bonus off (see `phase_loss_fn`). Without
    a phase mask in the batch (any call outside a Lopti update) this is verl's `ppo_loss` unchanged.
    """
    if PHASE_MASK not in data.keys():  # noqa: SIM118 (TensorDict refuses `in` on itself)
        return ppo_loss(config, model_output, data, dp_group)
    loss, metrics = ppo_loss(policy_config, model_output, data, dp_group)
    with_entropy = config.entropy_coeff != 0 and model_output.get("entropy") is not None
    if not (with_entropy or config.use_kl_loss):
        return loss, metrics

    fields = ["response_mask", PHASE_MASK] + (["ref_log_prob"] if config.use_kl_loss else [])
    padded = data.select(*fields).to_padded_tensor()
    phase = padded[PHASE_MASK].float()
    reduce = functools.partial(
        agg_loss,
        loss_mask=padded["response_mask"].bool(),
        loss_agg_mode=config.loss_agg_mode,
        **policy_config.global_batch_info,  # filled in by ppo_loss for this micro-batch
    )
    aggregation = metrics["actor/pg_loss"].aggregation
    if with_entropy:
        entropy_loss = reduce(loss_mat=no_padding_2_padding(model_output["entropy"], data) * phase)
        loss = loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=aggregation)
    if config.use_kl_loss:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        kl = kl_penalty(logprob=log_prob, ref_logprob=padded["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl_loss = reduce(loss_mat=kl * phase)
        loss = loss + config.kl_loss_coef * kl_loss
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return loss, metrics


def phase_loss_fn(config: ActorConfig) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    """Return the loss function to install on the actor workers (`set_loss_fn`) for a Lopti run."""
    policy_config = dataclasses.replace(config, use_kl_loss=False, entropy_coeff=0.0)
    return functools.partial(lopti_ppo_loss, config=config, policy_config=policy_config)
