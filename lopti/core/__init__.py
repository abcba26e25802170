"""The paper's math as small pure torch functions; see docs/paper.md for each section cited."""

from lopti.core._validate import NonFiniteError
from lopti.core.advantages import (
    ESTIMATORS,
    dr_grpo_advantages,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    token_advantages,
)
from lopti.core.aggregate import AGGREGATIONS, aggregate_loss
from lopti.core.bound import grad_norm_bounds, logit_grad_norm
from lopti.core.credit import CreditContext, CreditStep, TokenCredit, ar_credit, combine_credit, lopti_credit
from lopti.core.credit_presets import PRESETS, credit_problems, make_credit_steps, named_credit_steps
from lopti.core.isolation import (
    ORDERS,
    SPLITS,
    isolate_advantages,
    lopti_phase,
    low_prob_mask,
    phase_masks,
    quantile_eta,
    random_phase_masks,
    split_seed,
)
from lopti.core.kl import KL_ESTIMATORS, kl_penalty
from lopti.core.loss import cispo_policy_loss, clipped_policy_loss, sapo_policy_loss
from lopti.core.objective import ObjectiveTerms, token_objective
from lopti.core.reweight import ar_weights, reweight_advantages

__all__ = [
    "AGGREGATIONS",
    "ESTIMATORS",
    "KL_ESTIMATORS",
    "ORDERS",
    "PRESETS",
    "SPLITS",
    "CreditContext",
    "CreditStep",
    "NonFiniteError",
    "ObjectiveTerms",
    "TokenCredit",
    "aggregate_loss",
    "ar_credit",
    "ar_weights",
    "cispo_policy_loss",
    "clipped_policy_loss",
    "combine_credit",
    "credit_problems",
    "dr_grpo_advantages",
    "grad_norm_bounds",
    "grpo_advantages",
    "isolate_advantages",
    "kl_penalty",
    "logit_grad_norm",
    "lopti_credit",
    "lopti_phase",
    "low_prob_mask",
    "make_credit_steps",
    "masked_whiten",
    "named_credit_steps",
    "phase_masks",
    "quantile_eta",
    "random_phase_masks",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "reweight_advantages",
    "rloo_advantages",
    "sapo_policy_loss",
    "split_seed",
    "token_advantages",
    "token_objective",
]
