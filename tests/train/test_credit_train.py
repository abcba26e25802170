"""Per-token credit in LoptiGRPOTrainer: one training step per preset on the tiny model, user steps through
the trainer's `token_credit` argument, and the loss renormalisation of dropped tokens."""

import math

import pytest
import torch
from test_trainer import COMMON, id_reward, logged, make, one_batch  # pytest puts each test folder on sys.path
from transformers import AutoModelForCausalLM, AutoTokenizer

from lopti.core import PRESETS, TokenCredit
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

# What each preset logs after one step, and the range its share or mean must fall in on the tiny model.
EXPECTED = {
    "stapo": ("credit/stapo_kept_share", 0.85, 1.0),  # ≈ 0.01% in the paper; ≤ 5% by construction here
    "high_entropy": ("credit/high_entropy_kept_share", 0.15, 0.3),  # ρ = 0.2
    "clip_cov": ("credit/clip_cov_kept_share", 0.9, 1.0),  # at most one detached token per micro-batch
    "kl_cov": ("credit/kl_cov_selected_share", 0.0, 0.1),  # one penalised token per micro-batch
    "w_reinforce": ("credit/w_reinforce_weight_mean", 0.1, 1.0),
    "tr_grpo": ("credit/tr_grpo_weight_mean", 0.1, 0.2),  # a random model's tokens have π ≪ 0.1: the floor
    "stare": ("credit/stare_selected_share", 0.0, 0.2),
}


def test_every_preset_is_covered():
    assert set(EXPECTED) == set(PRESETS)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_one_training_step_per_preset(tiny_model_dir, kk_prompts, tmp_path, preset):
    trainer = make(
        LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1, token_credit=[preset]
    )
    trainer.train()
    key, low, high = EXPECTED[preset]
    (value,) = logged(trainer, key)
    assert low <= value <= high
    assert math.isfinite(logged(trainer, "loss")[0]) and logged(trainer, "grad_norm")[0] > 0
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    moved = max((p - s).abs().max().item() for p, s in zip(trainer.model.parameters(), start.parameters(), strict=True))
    assert moved > 0


def with_steps(folder, prompts, tmp_path, steps, **overrides):
    """Return a trainer built like test_trainer's `make`, with user credit steps."""
    args = LoptiGRPOConfig(output_dir=str(tmp_path / "steps"), **{**COMMON, **overrides})
    return LoptiGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder), reward_funcs=[id_reward], args=args,
        train_dataset=prompts, processing_class=AutoTokenizer.from_pretrained(folder), token_credit=steps,
    )  # fmt: skip


def drop_all(context):
    return TokenCredit(drop=context.response_mask)


def test_a_user_step_that_drops_every_token_leaves_the_model_unchanged(tiny_model_dir, kk_prompts, tmp_path):
    trainer = with_steps(tiny_model_dir, kk_prompts, tmp_path, drop_all, max_steps=1)
    trainer.train()
    assert logged(trainer, "credit/drop_all_kept_share") == [0.0] and logged(trainer, "loss") == [0.0]
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for p, s in zip(trainer.model.parameters(), start.parameters(), strict=True):
        assert torch.equal(p, s)


def test_dropped_tokens_leave_the_denominator_and_masked_ones_do_not(tiny_model_dir, kk_prompts, tmp_path):
    # The same tokens (every response's first one) dropped, as STAPO does, or only masked, as the 80/20
    # rule does: with the token-mean loss the dropped variant divides by the remaining tokens only.
    def first_tokens(context):
        return torch.zeros_like(context.response_mask).index_fill(1, torch.tensor([0]), True) & context.response_mask

    steps = {
        "dropped": {"dropped": lambda c: TokenCredit(drop=first_tokens(c))},
        "masked": {"masked": lambda c: TokenCredit(keep=~first_tokens(c))},
    }
    losses = {}
    for name, credit in steps.items():
        trainer = with_steps(tiny_model_dir, kk_prompts, tmp_path, credit, max_steps=1, loss_type="bnpo")
        batch = one_batch(trainer, kk_prompts)
        losses[name] = trainer.compute_loss(trainer.model, batch).item()
    mask = batch["completion_mask"].bool()
    total, first = mask.sum().item(), mask[:, 0].sum().item()
    assert losses["masked"] != 0
    assert losses["dropped"] == pytest.approx(losses["masked"] * total / (total - first), rel=1e-5)


def test_user_steps_are_named_and_cannot_shadow_presets(tiny_model_dir, kk_prompts, tmp_path):
    with pytest.raises(ValueError, match="a credit step named 'stapo' is already in use"):
        with_steps(tiny_model_dir, kk_prompts, tmp_path, {"stapo": drop_all}, token_credit=["stapo"])
    with pytest.raises(ValueError, match="two credit steps named 'drop_all'; pass a dict to name them"):
        with_steps(tiny_model_dir, kk_prompts, tmp_path, [drop_all, drop_all])
