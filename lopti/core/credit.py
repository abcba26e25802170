"""Per-token credit: one hook that decides how much of its advantage each response token gets.

AR (docs/paper.md §4), Lopti (§5) and their neighbours (`lopti.core.credit_presets`) all act on the same
per-token quantities — π_old, the current π, the entropy, the advantage's sign — and all end as one of
four edits of the objective. A credit step is any callable `step(context) -> TokenCredit`:

    weights     w_t ≥ 0 scales the advantage: Â_t → w_t·Â_t             (AR, W-REINFORCE, TR-GRPO, STARE)
    keep        policy gradient only on these tokens; advantages are zeroed elsewhere, denominators
                still count every response token                         (Lopti, 80/20 entropy, Clip-Cov)
    drop        tokens removed from the objective altogether (policy, KL, entropy) and from the loss
                denominators, which renormalises the loss over the rest  (STAPO)
    penalty     a per-token loss term added to the surrogate, differentiable        (KL-Cov)
    regularised the tokens whose KL and entropy terms count              (Lopti: each token in one phase)

Steps compose (`combine_credit`): weights multiply, keep and regularised masks intersect, drop masks
unite, penalties add. For w ≥ 0 the clipped surrogate of w·Â is w times that of Â (dual clip included),
so a reweighted token's gradient is exactly w times its plain gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from lopti.core._validate import check_same_shape
from lopti.core.constants import EPS_HIGH, EPS_LOW, LOPTI_ETA
from lopti.core.isolation import SPLITS, Order, Split, phase_masks, random_phase_masks
from lopti.core.reweight import ar_weights


@dataclass(frozen=True)
class CreditContext:
    """What a credit step sees: (B, T) tensors of one micro-batch, and the Lopti phase.

    `logprobs` carries the gradient (only a `penalty` may use it as such; selections must use
    `.detach()`); `entropies` is None when the caller computed none. `eps_low`/`eps_high` are the
    surrogate's clip range, for steps that leave already clipped tokens alone (Clip-Cov).
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor  # bool
    entropies: torch.Tensor | None = None
    phase: int | None = None
    eps_low: float = EPS_LOW
    eps_high: float = EPS_HIGH


@dataclass(frozen=True)
class TokenCredit:
    """A credit step's decision; None leaves that part of the objective as it is (see the module doc).

    `selected` only feeds the logs: the tokens a step singled out (KL-Cov's penalised tokens, STARE's
    reweighted ones), logged as `credit/<step>_selected_share`.
    """

    weights: torch.Tensor | None = None
    keep: torch.Tensor | None = None
    drop: torch.Tensor | None = None
    penalty: torch.Tensor | None = None
    regularised: torch.Tensor | None = None
    selected: torch.Tensor | None = None


CreditStep = Callable[[CreditContext], TokenCredit]


def ar_credit(alpha: float) -> CreditStep:
    """Return AR as a credit step: weights α·π_old + (1 − α) (docs/paper.md §4); α = 0 gives all-ones."""

    def ar(context: CreditContext) -> TokenCredit:
        return TokenCredit(weights=ar_weights(context.old_logprobs, alpha))

    return ar


def lopti_credit(
    eta: float = LOPTI_ETA, order: Order = "low_first", split: Split = "probability", seed: int | None = None
) -> CreditStep:
    """Return Lopti as a credit step: the phase's tokens (split by π_old < η) keep the policy gradient,
    and pay their KL and entropy terms, in that phase only (docs/paper.md §5).

    `split` chooses the phase's tokens: `probability` (Lopti), `random` (the same sizes drawn with `seed`:
    `random_phase_masks`) or `none` (every token in both phases: GRPO with two passes).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")

    def lopti(context: CreditContext) -> TokenCredit:
        if context.phase is None or split == "none":
            return TokenCredit()
        if split == "random":
            if seed is None:
                raise ValueError("split='random' needs a seed")
            masks = random_phase_masks(context.old_logprobs, context.response_mask, seed, eta, order)
        else:
            masks = phase_masks(context.old_logprobs, context.response_mask, eta, order)
        active = masks[context.phase]
        return TokenCredit(keep=active, regularised=active)

    return lopti


def _and(first: torch.Tensor | None, second: torch.Tensor | None) -> torch.Tensor | None:
    return second if first is None else first if second is None else first & second


def combine_credit(
    context: CreditContext, steps: Mapping[str, CreditStep]
) -> tuple[TokenCredit, dict[str, TokenCredit]]:
    """Return (the steps' combined decision, each step's own decision by name), steps applied in order.

    Every returned tensor is checked to have the context's shape; masks come back as bool, weights and
    masks detached (they are constants of the step), penalties as they are.
    """
    decisions: dict[str, TokenCredit] = {}
    weights = keep = drop = penalty = regularised = None
    for name, step in steps.items():
        decision = step(context)
        if not isinstance(decision, TokenCredit):
            raise ValueError(f"credit step {name!r} returned {type(decision).__name__}, not a TokenCredit")
        given = {k: v for k, v in vars(decision).items() if v is not None}
        check_same_shape(advantages=context.advantages, **{f"{name}.{k}": v for k, v in given.items()})
        decision = TokenCredit(
            weights=None if decision.weights is None else decision.weights.detach(),
            keep=None if decision.keep is None else decision.keep.detach().bool(),
            drop=None if decision.drop is None else decision.drop.detach().bool(),
            penalty=decision.penalty,
            regularised=None if decision.regularised is None else decision.regularised.detach().bool(),
            selected=None if decision.selected is None else decision.selected.detach().bool(),
        )
        decisions[name] = decision
        if decision.weights is not None:
            weights = decision.weights if weights is None else weights * decision.weights
        keep, regularised = _and(keep, decision.keep), _and(regularised, decision.regularised)
        if decision.drop is not None:
            drop = decision.drop if drop is None else drop | decision.drop
        if decision.penalty is not None:
            penalty = decision.penalty if penalty is None else penalty + decision.penalty
    return TokenCredit(weights, keep, drop, penalty, regularised), decisions
