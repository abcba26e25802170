"""The trainer's per-step bucket metrics: the exact gradient share from the fused head's log Σ p², and the
split by advantage sign, each checked against autograd on the model's full logits."""

import pytest
import torch
from test_trainer import make, one_batch

from lopti.core.bound import logit_grad_norm_from_sum_sq
from lopti.core.buckets import bucket_labels, probability_buckets
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer


def autograd_logit_grad_norms(model, batch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (log π, ‖∂(−log π)/∂z‖) of every completion token, from the full logits and autograd (float64)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -keep - 1 : -1].double() / temperature
    logits.requires_grad_(True)
    logps = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    (-logps.sum()).backward()  # each token's −log π depends on its own logits only
    return logps.detach(), logits.grad.norm(dim=-1)


@pytest.fixture(scope="module")
def sharpened_model_dir(tiny_model_dir, tmp_path_factory):
    """Return the tiny model with its final norm scaled ×8: π of sampled tokens spread up to about 0.8."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("sharpened-model")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder


def test_exact_gradient_share_matches_autograd(sharpened_model_dir, kk_prompts, tmp_path):
    temperature = 0.7  # the fused head divides by it: the norms must be those of the tempered softmax
    trainer = make(
        LoptiGRPOTrainer, LoptiGRPOConfig, sharpened_model_dir, kk_prompts, tmp_path,
        max_steps=1, temperature=temperature, probability_buckets=[0, 0.5, 1],
    )  # fmt: skip
    batch = one_batch(trainer, kk_prompts)
    trainer.compute_loss(trainer.model, batch)
    mask = batch["completion_mask"].bool()
    logps, norms = autograd_logit_grad_norms(trainer.model, batch, temperature)
    assert (logps[mask].exp() > 0.5).any() and (logps[mask].exp() < 0.5).any(), "the test needs both buckets"
    # log Σ p² kept from the loss's forward gives each token's exact norm, √(1 − 2π + Σ p²)
    fused = logit_grad_norm_from_sum_sq(trainer._training_logps, trainer._log_sum_sq_probs)
    torch.testing.assert_close(fused[mask], norms[mask], atol=1e-5, rtol=0)

    # the logged shares are those of Σ|Â|·‖∂z‖ with autograd's norms, overall and per sign of Â
    advantages = batch["advantages"][:, None].expand_as(logps).double()
    assert (advantages[mask] > 0).any() and (advantages[mask] < 0).any(), "the test needs both signs"
    index = probability_buckets(trainer._training_logps, mask, [0, 0.5, 1])  # on-policy: π_old = π
    metrics = trainer._metrics["train"]
    for prefix, where in (("", mask), ("pos_", mask & (advantages > 0)), ("neg_", mask & (advantages < 0))):
        weight = advantages.abs() * norms * where
        for k, label in enumerate(bucket_labels([0, 0.5, 1])):
            expected = (weight * (index == k)).sum() / weight.sum()
            assert metrics[f"probs/{prefix}grad_share_{label}"][-1] == pytest.approx(expected.item(), abs=1e-5)
            count = (where & (index == k)).sum().item() / where.sum().item()
            assert metrics[f"probs/{prefix}share_{label}"][-1] == pytest.approx(count, abs=1e-12)
    # the (1 − π) bound gives another share: the exact norm is not the fallback in disguise
    bound = advantages.abs() * -torch.expm1(logps) * mask
    assert abs(metrics["probs/grad_share_[0.00,0.50)"][-1] - (bound * (index == 0)).sum() / bound.sum()) > 1e-3


def test_exact_norm_of_confident_tokens_is_within_float32_reach(peaked_model_dir, kk_prompts, tmp_path):
    # Where π → 1, 1 − 2π + Σ p² is a small difference of terms near 1, each ~1e-6 off in the kernel's float32:
    # the norm is then off by about 1e-6 / norm, and never leaves Proposition 4.2's bounds.
    trainer = make(
        LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path, max_steps=1, temperature=0.5
    )
    batch = one_batch(trainer, kk_prompts)
    trainer.compute_loss(trainer.model, batch)
    mask = batch["completion_mask"].bool()
    logps, norms = autograd_logit_grad_norms(trainer.model, batch, 0.5)
    assert (logps[mask].exp() > 0.98).any(), "the test needs confident tokens"
    fused = logit_grad_norm_from_sum_sq(trainer._training_logps, trainer._log_sum_sq_probs)
    assert torch.all((fused - norms)[mask].abs() <= 1e-5 + 1e-6 / norms[mask])
    one_minus_pi = -torch.expm1(trainer._training_logps.double())
    assert torch.all(fused[mask] >= one_minus_pi[mask]) and torch.all(fused[mask] <= 2**0.5 * one_minus_pi[mask])


def test_without_log_sum_sq_the_bound_is_the_fallback(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1)
    batch = one_batch(trainer, kk_prompts)
    original = trainer._get_per_token_logps_and_entropies

    def without_sum_sq(*args, **kwargs):  # as for a model whose forward TRL could not patch
        out = original(*args, **kwargs)
        trainer._log_sum_sq_probs = None
        return out

    trainer._get_per_token_logps_and_entropies = without_sum_sq
    trainer.compute_loss(trainer.model, batch)
    mask = batch["completion_mask"].bool()
    logps = trainer._training_logps.double()
    weight = batch["advantages"][:, None].abs().double() * (1 - logps.exp()) * mask
    index = probability_buckets(trainer._training_logps, mask)
    expected = (weight * (index == 0)).sum() / weight.sum()
    assert trainer._metrics["train"]["probs/grad_share_[0.00,0.25)"][-1] == pytest.approx(expected.item(), rel=1e-9)


def test_ar_logs_its_weights_range_and_the_gradient_share_before_and_after_reweighting(
    sharpened_model_dir, kk_prompts, tmp_path
):
    alpha = 0.9
    trainer = make(
        LoptiGRPOTrainer, LoptiGRPOConfig, sharpened_model_dir, kk_prompts, tmp_path,
        max_steps=1, ar_alpha=alpha, probability_buckets=[0, 0.5, 1], temperature=0.7,
    )  # fmt: skip
    batch = one_batch(trainer, kk_prompts)
    trainer.compute_loss(trainer.model, batch)
    mask = batch["completion_mask"].bool()
    logps = trainer._training_logps.double()  # on-policy: π_old = π
    norms = logit_grad_norm_from_sum_sq(trainer._training_logps, trainer._log_sum_sq_probs).double()
    weights = alpha * logps.exp() + (1 - alpha)
    metrics = trainer._metrics["train"]
    assert metrics["ar/weight_min"][-1] == pytest.approx(weights[mask].min().item(), rel=1e-5)
    assert metrics["ar/weight_max"][-1] == pytest.approx(weights[mask].max().item(), rel=1e-5)
    advantages = batch["advantages"][:, None].expand_as(logps).abs().double()
    low = probability_buckets(trainer._training_logps, mask, [0, 0.5, 1]) == 0
    assert (mask & low).any() and (mask & ~low).any(), "the test needs both buckets"
    for name, weight in (("plain_grad_share", advantages * norms), ("grad_share", advantages * weights * norms)):
        expected = (weight * (mask & low)).sum() / (weight * mask).sum()
        assert metrics[f"probs/{name}_[0.00,0.50)"][-1] == pytest.approx(expected.item(), abs=1e-5)
    # AR weighs low-probability tokens down, so their share of the gradient falls
    assert metrics["probs/grad_share_[0.00,0.50)"][-1] < metrics["probs/plain_grad_share_[0.00,0.50)"][-1] - 1e-3
