"""Conformance: TRL's loss options × model families, trained 2 optimizer steps by GRPOTrainer and by LoptiGRPOTrainer.

Families (tiny, built offline from the tiny tokenizer): dense Qwen2, Qwen3-MoE and GPT-OSS with their router losses,
LFM2 (a convolution layer, then attention) and LLaVA (a CLIP vision tower on 8×8 images, its processor built from
CLIP's image processor). With lopti's features off each cell gives GRPOTrainer's rollouts, every metric it logs
under its name, its losses, grad norms and final weights: to docs/guides/trl.md's first tolerance row with
LoptiGRPOTrainer, to its second with CpuLoptiGRPOTrainer, the fast path (which serves only the dense model's
forwards; the others it hands to TRL). With AR and Lopti on, each option that composes trains (both phases take
gradient steps, the weights move, the loss is finite), and each that does not is refused when the config is built,
with one line naming it: the config never sees the model, so the refusals are tested once, not per family.
Unmarked: the dense model's cells (three of them with the fast path) and the refusals; the rest is marked slow.
"""

import math

import pytest
from test_trainer import EXACT, FAST_PATH, load, logged, make
from test_trl_options import assert_trains_like_grpo, train_both

from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

FAMILIES = {
    "dense": ("tiny_model_dir", "kk_prompts"),
    "moe": ("tiny_moe_model_dir", "kk_prompts"),
    "gpt-oss": ("tiny_gpt_oss_model_dir", "kk_prompts"),
    "hybrid": ("tiny_hybrid_model_dir", "kk_prompts"),
    "vision": ("tiny_vision_model_dir", "image_prompts"),
}

# TRL options that compose with AR and Lopti (lopti's objective computes them) ...
COMPOSING = {
    "dapo": dict(loss_type="dapo"),
    "bnpo": dict(loss_type="bnpo"),
    "grpo": dict(loss_type="grpo"),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "cispo": dict(loss_type="cispo", epsilon_high=5.0),
    "sapo": dict(loss_type="sapo"),
    "luspo": dict(loss_type="luspo"),
    "kl": dict(beta=0.04, use_bias_correction_kl=True),  # TRL's default correction, set for both trainers
    "entropy-bonus": dict(entropy_coef=0.01),
}
# ... and those only GRPOTrainer's own loss computes, with the start of the line that refuses them with lopti on.
TRL_ONLY = {
    "sequence-ratio": (dict(importance_sampling_level="sequence"), "importance_sampling_level='sequence'"),
    "top-entropy": (dict(top_entropy_quantile=0.5), "top_entropy_quantile=0.5"),
    "off-policy-mask": (dict(off_policy_mask_threshold=1e-4), "off_policy_mask_threshold=0.0001"),
}
# Lopti off: every option with two passes as well, so that the second pass's ratio r ≠ 1 reaches the clips.
OPTIONS = {
    **COMPOSING,
    **{name: settings for name, (settings, _) in TRL_ONLY.items()},
    "two-passes": dict(num_iterations=2, epsilon=0.01),
}
SLOW_FAMILIES = [pytest.param(family, marks=pytest.mark.slow) for family in FAMILIES if family != "dense"]
EVERY_FAMILY = ["dense", *SLOW_FAMILIES]


def family_inputs(request, family):
    """Return the model folder and the prompts of `family`."""
    model_fixture, prompts_fixture = FAMILIES[family]
    return request.getfixturevalue(model_fixture), request.getfixturevalue(prompts_fixture)


def largest_change(trainer, folder) -> float:
    """Return the largest change of any weight from the saved model to the trainer's."""
    start = load(folder)[0]
    pairs = zip(trainer.model.parameters(), start.parameters(), strict=True)
    return max((p - s).abs().max().item() for p, s in pairs)


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("family", EVERY_FAMILY)
def test_with_lopti_off_each_option_trains_like_grpo(request, tmp_path, family, option):
    folder, prompts = family_inputs(request, family)
    plain, ours = train_both(folder, prompts, tmp_path, OPTIONS[option], cpu_fast_path=False)
    assert_trains_like_grpo(plain, ours, EXACT)
    assert largest_change(plain, folder) > 1e-3, "the comparison needs parameter updates"
    if option == "two-passes":  # ε = 0.01: the second pass clips, so TRL's clip ratios are compared where not 0
        assert logged(plain, "clip_ratio/region_mean")[1] > 0.0


FAST_CELLS = [
    *[pytest.param("dense", option) for option in ("dapo", "kl", "two-passes")],
    *[pytest.param("dense", option, marks=pytest.mark.slow) for option in OPTIONS if option not in ("dapo", "kl")],
    *[pytest.param(family, "two-passes", marks=pytest.mark.slow) for family in FAMILIES if family != "dense"],
]


@pytest.mark.parametrize(("family", "option"), FAST_CELLS)
def test_with_lopti_off_and_the_fast_path_on_each_option_trains_like_grpo(request, tmp_path, family, option):
    folder, prompts = family_inputs(request, family)
    plain, ours = train_both(folder, prompts, tmp_path, OPTIONS[option], cpu_fast_path=True)
    assert_trains_like_grpo(plain, ours, FAST_PATH)


@pytest.mark.parametrize("option", COMPOSING)
@pytest.mark.parametrize("family", EVERY_FAMILY)
def test_with_ar_and_lopti_on_each_composing_option_trains(request, tmp_path, family, option):
    """η = 1/V, the uniform probability, puts some of a random tiny model's sampled tokens on each side, so
    each of Lopti's two phases (one optimizer step each) has tokens to train on."""
    folder, prompts = family_inputs(request, family)
    vocabulary = load(folder)[0].get_output_embeddings().weight.size(0)
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, folder, prompts, tmp_path, max_steps=2, ar_alpha=0.3,
                   lopti=True, num_iterations=2, lopti_eta=1.0 / vocabulary, **COMPOSING[option])  # fmt: skip
    trainer.train()
    assert not trainer._trl_loss
    low_share = logged(trainer, "lopti/low_prob_token_share")
    assert 0.0 < low_share[0] < 1.0, "each phase needs tokens"
    assert [len(logged(trainer, f"lopti/phase{k}_loss")) for k in (1, 2)] == [1, 1]
    assert all(math.isfinite(loss) for loss in logged(trainer, "loss"))
    assert all(norm > 0.0 for norm in logged(trainer, "grad_norm")), "each phase's step has a gradient"
    assert logged(trainer, "ar/weight_mean")[0] < 1.0
    assert largest_change(trainer, folder) > 1e-3


@pytest.mark.parametrize(("settings", "option"), TRL_ONLY.values(), ids=TRL_ONLY.keys())
def test_with_ar_and_lopti_on_each_trl_only_option_is_refused_in_one_line(tmp_path, settings, option):
    with pytest.raises(ValueError) as refusal:
        LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], ar_alpha=0.3, lopti=True,
                        num_iterations=2, **settings)  # fmt: skip
    message = str(refusal.value)
    assert f"{option} does not compose with ar_alpha=0.3, lopti=True: " in message
    assert "\n" not in message
    assert message.count("does not compose") == 1, "one line, for the one option"
