"""What `LoptiGRPOTrainer` logs of each loss pass: TRL's metrics of the loss under TRL's names, and lopti's own.

A mixin of the trainer (lopti/train/trainer.py), kept apart so that the trainer's file holds the algorithm; the
metrics' meanings are in docs/guides/trl.md ("Metrics").
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanmax, nanmin

from lopti.core import low_prob_mask
from lopti.core.bound import logit_grad_norm_from_sum_sq
from lopti.core.buckets import bucket_labels, bucket_totals, probability_buckets
from lopti.core.objective import credit_shares


class StepMetrics:
    """Logging of one loss pass, on the trainer's `_metrics` (TRL's store), gathered over the processes."""

    def _log_step_metrics(self, logps, old_logps, advantages, entropies, mask, terms, policy_loss, phase, kl, aux_loss):
        """Log TRL's metrics of the loss with TRL's names and meanings, and lopti's own under its prefixes.

        `advantages` are the (B, T) advantages before lopti's credit (AR's positive weights keep their signs).

        `policy_loss` is TRL's: the aggregated policy (and KL) loss before the entropy bonus and before the
        division for gradient accumulation, logged, as TRL logs it, when the entropy bonus is on; with Lopti,
        `lopti/phase1_loss` and `lopti/phase2_loss` are the same quantity on each phase's steps.
        """
        mode = "train" if self.model.training else "eval"
        valid = mask.bool()

        def mean_of(values: torch.Tensor, where: torch.Tensor = valid) -> float:
            return self._gathered_mean(values, where)

        metrics = self._metrics[mode]
        metrics["entropy"].append(mean_of(entropies))
        if self.args.ar_alpha > 0:
            weights = terms.credit["ar"].weights.detach()
            metrics["ar/weight_mean"].append(mean_of(weights))
            least = self.accelerator.gather(weights.masked_fill(~valid, float("inf")).min().reshape(1))
            most = self.accelerator.gather(weights.masked_fill(~valid, float("-inf")).max().reshape(1))
            metrics["ar/weight_min"].append(least.min().item())
            metrics["ar/weight_max"].append(most.max().item())
        for key, values in credit_shares(terms.credit, valid).items():
            metrics[f"credit/{key}"].append(mean_of(values))
        for name, value in terms.metrics.items():
            metrics[f"clip/{name}"].append(self.accelerator.gather(value.detach()).nanmean().item())
        self._log_trl_clip_ratios(torch.exp(logps.detach() - old_logps), advantages, mask)
        if kl is not None:
            metrics["kl"].append(mean_of(kl, terms.active))
        gathered_policy_loss = self.accelerator.gather(policy_loss).nanmean().item()
        if self.args.lopti:
            metrics[f"lopti/phase{phase + 1}_loss"].append(gathered_policy_loss)
        if self.args.entropy_coef != 0.0:
            metrics["policy_loss"].append(gathered_policy_loss)
            if mode == "train" and self.accelerator.sync_gradients:  # once per optimizer step, as TRL logs it
                metrics["entropy_coef"].append(self.args.entropy_coef)
        if aux_loss is not None:
            metrics["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

    def _log_trl_clip_ratios(self, ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        """Log the clip ratios GRPOTrainer logs for its `loss_type`, of the token ratio r = π/π_old, with TRL's names
        and meanings, so that a run logs them whichever code computes the loss.

        The clipped surrogates (grpo, bnpo, dr_grpo, dapo, luspo): `clip_ratio/low_mean`, `high_mean` and
        `region_mean`, the shares of tokens with r < 1 − ε_low and Â < 0, r > 1 + ε_high and Â > 0, or either, over
        all processes' tokens; `clip_ratio/low_min` and `high_max`, the least and the most of one response's tokens
        clipped low and high. CISPO: `cispo_clip_ratio`, the share with r > ε_high and Â > 0. SAPO: none.
        """
        metrics = self._metrics["train" if self.model.training else "eval"]
        valid = mask.bool()
        if self.loss_type == "cispo":
            capped = (ratio > self.epsilon_high) & (advantages > 0)
            metrics["cispo_clip_ratio"].append(self._gathered_mean(capped.float(), valid))
        if self.loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
            return
        low = ((ratio < 1 - self.epsilon_low) & (advantages < 0)).float()
        high = ((ratio > 1 + self.epsilon_high) & (advantages > 0)).float()
        for name, clipped in (("low", low), ("high", high), ("region", torch.maximum(low, high))):
            metrics[f"clip_ratio/{name}_mean"].append(self._gathered_mean(clipped, valid))

        def per_response(clipped: torch.Tensor) -> torch.Tensor:  # NaN for a response without counted tokens
            return self.accelerator.gather((clipped * mask).sum(-1) / mask.sum(-1))

        metrics["clip_ratio/low_min"].append(nanmin(per_response(low)).item())
        metrics["clip_ratio/high_max"].append(nanmax(per_response(high)).item())

    def _log_probability_metrics(self, logps, old_logps, mask, active, advantages, phase, plain=None) -> None:
        """Log each π_old bucket's share of the tokens and of the gradient, also per advantage sign, and Lopti's moves.

        probs/grad_share_*: each bucket's share of Σ |Â|·‖∂(−log π)/∂z‖, the advantage-weighted logit-gradient
        norm at the current policy, with `advantages` as the update weighs them (AR's weights included): exact,
        √(1 − 2π + Σ p²), from the log Σ p² that the fused LM head returned with these log-probs; where that is
        unavailable, the bound (1 − π), exact up to a factor in [√(N/(N−1)), √2] (Proposition 4.2). No extra
        backward either way. probs/plain_grad_share_*: the same with `plain`, the advantages before the credit
        steps, so that the two say how far AR moved the gradient off the low-probability tokens.
        probs/pos_share_*, probs/pos_grad_share_* and probs/neg_* are the same over the tokens with Â > 0 and with
        Â < 0 alone. With Lopti, phase 2 logs the mean |log π − log π_old| of the phase-1 and the phase-2 tokens:
        what phase 1 moved.
        """
        metrics = self._metrics["train" if self.model.training else "eval"]
        low = low_prob_mask(old_logps, mask, self.args.lopti_eta).float()
        metrics["lopti/low_prob_token_share"].append(self._gathered_mean(low, mask.bool()))
        edges = self.args.probability_buckets
        labels = bucket_labels(edges)
        index = probability_buckets(old_logps, mask, edges)
        sum_sq = self._log_sum_sq_probs
        if sum_sq is not None and sum_sq.shape == logps.shape:
            norm = logit_grad_norm_from_sum_sq(logps, sum_sq)
        else:
            norm = -torch.expm1(logps.detach().double())
        weight = advantages.abs() * norm
        signs = {"": mask.bool(), "pos_": advantages > 0, "neg_": advantages < 0}
        totals = [
            bucket_totals(index.masked_fill(~where, -1), len(labels), values)
            for where in signs.values()
            for values in (None, weight)
        ]
        if plain is not None:
            totals.append(bucket_totals(index.masked_fill(~mask.bool(), -1), len(labels), plain.abs() * norm))
        totals = self.accelerator.gather(torch.stack(totals).unsqueeze(0)).sum(dim=0)
        for sign, tokens, gradient in zip(signs, totals[0:6:2], totals[1:6:2], strict=True):
            token_share, gradient_share = tokens / tokens.sum().clamp(min=1), gradient / gradient.sum().clamp(min=1e-30)
            for k, label in enumerate(labels):
                metrics[f"probs/{sign}share_{label}"].append(token_share[k].item())
                metrics[f"probs/{sign}grad_share_{label}"].append(gradient_share[k].item())
        if plain is not None:
            plain_share = totals[6] / totals[6].sum().clamp(min=1e-30)
            for k, label in enumerate(labels):
                metrics[f"probs/plain_grad_share_{label}"].append(plain_share[k].item())
        if self.args.lopti and phase == 1 and self.args.lopti_split != "none":  # "none": no phase-1-only tokens
            moved = (logps.detach() - old_logps).abs()
            for name, where in (("phase1_tokens", mask.bool() & ~active), ("phase2_tokens", active)):
                metrics[f"lopti/dlogp_{name}"].append(self._gathered_mean(moved, where))

    def _gathered_mean(self, values: torch.Tensor, where: torch.Tensor) -> float:
        """Return the mean of `values` over `where`, across all processes."""
        total = torch.stack([(values * where).sum(), where.sum().to(values.dtype)]).detach()
        total = self.accelerator.gather(total).view(-1, 2).sum(dim=0)
        return (total[0] / total[1].clamp(min=1)).item()
