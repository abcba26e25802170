"""TRL's loss options beyond the four loss types lopti's objective has always computed: with lopti's loss features
off each trains as GRPOTrainer trains; with them on it composes as docs/guides/trl.md states, or the config says
why not.
"""

import math
from functools import partial

import pytest
import torch
from test_trainer import EXACT, FAST_PATH, logged, lopti_trainer, make, one_batch
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from lopti.core import CreditContext, TokenCredit
from lopti.cpu.fast_path import CpuFastPath
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

# Logged keys that measure time, not training.
TIMINGS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "step_time"}

TRL_OPTIONS = {
    "cispo+two-passes": dict(loss_type="cispo", epsilon_high=1.1, num_iterations=2),
    "sapo+two-passes": dict(loss_type="sapo", num_iterations=2),
    "luspo+sequence": dict(loss_type="luspo", importance_sampling_level="sequence", num_iterations=2),
    "vespo+two-passes": dict(loss_type="vespo", num_iterations=2),
    "sequence-ratio": dict(importance_sampling_level="sequence", num_iterations=2),
    "delta+two-passes": dict(delta=1.05, epsilon=0.01, num_iterations=2),
    "adaptive-entropy": dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=100.0),
    "top-entropy": dict(top_entropy_quantile=0.5),
    "off-policy-mask": dict(off_policy_mask_threshold=1e-4, num_iterations=2),
}


# Where lopti's own metrics live (docs/guides/trl.md, "Metrics").
LOPTI_PREFIXES = ("lopti/", "probs/", "clip/", "ar/", "credit/", "quality/")


def assert_trains_like_grpo(plain, ours, tolerance):
    """Assert the same rollouts, every metric GRPOTrainer logs (losses included) under its name, lopti's additions
    under lopti's prefixes, and the final weights."""
    assert logged(ours, "num_tokens") == logged(plain, "num_tokens")
    lines = [(p, o) for p, o in zip(plain.state.log_history, ours.state.log_history, strict=True) if "loss" in p]
    assert len(lines) == plain.args.max_steps
    for trl_line, lopti_line in lines:
        assert trl_line.keys() <= lopti_line.keys(), f"TRL's {sorted(trl_line.keys() - lopti_line.keys())} missing"
        added = lopti_line.keys() - trl_line.keys()
        assert all(key.startswith(LOPTI_PREFIXES) for key in added), sorted(added)
        for key in trl_line.keys() - TIMINGS - {"grad_norm"}:
            assert lopti_line[key] == pytest.approx(trl_line[key], abs=tolerance["loss"]), key
        assert lopti_line["grad_norm"] == pytest.approx(trl_line["grad_norm"], rel=tolerance["grad_norm"])
    for p, q in zip(plain.model.parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=tolerance["weights"], rtol=0)


def train_both(folder, prompts, tmp_path, settings, cpu_fast_path=True, **lopti_settings):
    plain = make(GRPOTrainer, GRPOConfig, folder, prompts, tmp_path, max_steps=2, **settings)
    plain.train()
    ours = make(lopti_trainer(cpu_fast_path), LoptiGRPOConfig, folder, prompts, tmp_path, max_steps=2, **settings,
                **lopti_settings)  # fmt: skip
    ours.train()
    return plain, ours


# GRPOConfig options read by TRL's generation, rewards, advantages and reference model, which lopti only observes;
# the sampling settings also with the fast path, whose rollout has its own sampling loop.
REFERENCE_SYNC = dict(sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=0.5)
OBSERVED_OPTIONS = {
    "sampling": (dict(temperature=0.7, top_p=0.9, top_k=20, min_p=0.01, repetition_penalty=1.2), True),
    "rewards": (dict(scale_rewards="batch", multi_objective_aggregation="normalize_then_sum"), False),
    "reference-sync": (dict(beta=0.04, use_bias_correction_kl=True, **REFERENCE_SYNC), False),
}


@pytest.mark.parametrize(("settings", "cpu_fast_path"), OBSERVED_OPTIONS.values(), ids=OBSERVED_OPTIONS.keys())
def test_options_trls_own_code_reads_train_like_grpo(tiny_model_dir, kk_prompts, tmp_path, settings, cpu_fast_path):
    plain, ours = train_both(tiny_model_dir, kk_prompts, tmp_path, settings, cpu_fast_path=cpu_fast_path)
    assert not ours._trl_loss
    assert_trains_like_grpo(plain, ours, FAST_PATH if cpu_fast_path else EXACT)


@pytest.mark.parametrize("settings", TRL_OPTIONS.values(), ids=TRL_OPTIONS.keys())
def test_each_option_trains_like_grpo_with_lopti_off(tiny_model_dir, kk_prompts, tmp_path, settings):
    plain, ours = train_both(tiny_model_dir, kk_prompts, tmp_path, settings, cpu_fast_path=False)
    assert ours._trl_loss
    assert_trains_like_grpo(plain, ours, EXACT)
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    moved = max((p - s).abs().max().item() for p, s in zip(ours.model.parameters(), start.parameters(), strict=True))
    assert moved > 1e-3, "the comparison needs parameter updates"
    assert logged(ours, "probs/share_[0.00,0.25)"), "lopti's probability metrics are logged on TRL's loss too"


@pytest.mark.parametrize("option", ["cispo+two-passes", "sequence-ratio"])
def test_the_fast_path_serves_trls_loss(tiny_model_dir, kk_prompts, tmp_path, monkeypatch, option):
    """Two passes with one optimizer step each: the fast path also leaves out the old-log-prob forward."""
    left_out = []
    forward = CpuFastPath._get_per_token_logps_and_entropies

    def counted(self, *args, **kwargs):
        result = forward(self, *args, **kwargs)
        left_out.append(result[0] is None)
        return result

    monkeypatch.setattr(CpuFastPath, "_get_per_token_logps_and_entropies", counted)
    plain, ours = train_both(tiny_model_dir, kk_prompts, tmp_path, TRL_OPTIONS[option], cpu_fast_path=True)
    assert sum(left_out) == 1, "the one generated batch's old-log-prob forward is left out"
    assert_trains_like_grpo(plain, ours, FAST_PATH)


def test_lopti_advantages_reach_trls_loss(tiny_model_dir, kk_prompts, tmp_path):
    """advantage_estimator changes only the advantages: lopti's Dr.GRPO ones, per token, give TRL's loss what
    TRL's own group-centred advantages (scale_rewards='none') give it."""
    plain = make(GRPOTrainer, GRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=2, loss_type="sapo",
                 scale_rewards="none")  # fmt: skip
    plain.train()
    ours = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=2,
                loss_type="sapo", advantage_estimator="dr_grpo")  # fmt: skip
    ours.train()
    assert ours._trl_loss
    assert_trains_like_grpo(plain, ours, EXACT)


COMPOSING = {
    "cispo+ar": (dict(loss_type="cispo", epsilon_high=1.05, ar_alpha=0.5), None),
    "sapo+ar": (dict(loss_type="sapo", ar_alpha=0.5), None),
    "luspo+ar": (dict(loss_type="luspo", ar_alpha=0.5), None),
    "cispo+lopti-phase1": (dict(loss_type="cispo", epsilon_high=1.05, lopti=True, num_iterations=2), 0),
    "sapo+lopti-phase2": (dict(loss_type="sapo", lopti=True, num_iterations=2), 1),
}


def trainer_and_batch(model_dir, kk_prompts, tmp_path, **settings) -> tuple[LoptiGRPOTrainer, dict]:
    """Return a LoptiGRPOTrainer whose loss is lopti's own (not TRL's), and one generated batch after a loss pass on
    it without gradients (so `_latest_logps` holds its log-probs)."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, model_dir, kk_prompts, tmp_path, max_steps=1, **settings)
    assert not trainer._trl_loss
    batch = one_batch(trainer, kk_prompts)
    with torch.no_grad():
        trainer._compute_loss(trainer.model, batch)
    return trainer, batch


@pytest.mark.parametrize(("settings", "phase"), COMPOSING.values(), ids=COMPOSING.keys())
def test_composing_loss_types_are_trls_surrogate_on_lopti_credited_advantages(
    peaked_model_dir, kk_prompts, tmp_path, settings, phase
):
    """docs/guides/trl.md: with AR (α = 0.5: w = 0.5·π_old + 0.5) or a Lopti phase (low_first: π_old < η in phase 1,
    the rest in phase 2) the loss and its gradient are TRL's for the same loss_type, given the per-token
    advantages w·Â, or Â on the phase's tokens and 0 elsewhere. Old log-probs off the current ones make r ≠ 1."""
    trainer, batch = trainer_and_batch(peaked_model_dir, kk_prompts, tmp_path, **settings)
    shift = torch.linspace(-0.3, 0.3, trainer._latest_logps.numel()).view_as(trainer._latest_logps)
    batch["old_per_token_logps"] = trainer._latest_logps + shift
    pi_old = batch["old_per_token_logps"].exp()
    if phase is None:
        credit = 0.5 * pi_old + 0.5
    else:
        trainer._step = phase * trainer.args.steps_per_generation  # the pass over the batch that is this phase
        low = (pi_old < trainer.args.lopti_eta).float()
        credit = low if phase == 0 else 1.0 - low
        assert 0 < (low * batch["completion_mask"]).sum() < batch["completion_mask"].sum(), "both phases need tokens"

    def loss_and_gradient(compute_loss, inputs):
        trainer.model.zero_grad()
        loss = compute_loss(trainer.model, inputs)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in trainer.model.parameters()]

    lopti_loss, lopti_grads = loss_and_gradient(trainer._compute_loss, batch)
    credited = {**batch, "advantages": batch["advantages"][:, None] * credit}
    trl_loss, trl_grads = loss_and_gradient(lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs),
                                            credited)  # fmt: skip
    plain_loss, _ = loss_and_gradient(lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs), batch)
    assert abs(plain_loss - trl_loss) > 1e-3, "the credit must change the loss for the test to see it"
    assert lopti_loss == pytest.approx(trl_loss, abs=1e-6)
    for ours, theirs in zip(lopti_grads, trl_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_cispo_with_ar_and_lopti_trains_both_phases(peaked_model_dir, kk_prompts, tmp_path):
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path, max_steps=2,
                   loss_type="cispo", epsilon_high=5.0, ar_alpha=0.3, lopti=True, num_iterations=2)  # fmt: skip
    trainer.train()
    assert [len(logged(trainer, f"lopti/phase{k}_loss")) for k in (1, 2)] == [1, 1]
    assert all(torch.isfinite(torch.tensor(logged(trainer, "loss"))))
    assert logged(trainer, "clip/cispo_clip_frac") and logged(trainer, "ar/weight_mean")[0] < 1.0


FEATURES = {
    "ar": dict(ar_alpha=0.2),
    "lopti": dict(lopti=True, num_iterations=2),
    "preset": dict(token_credit=["stapo"]),
}
REFUSED = {
    "vespo": (dict(loss_type="vespo"), "loss_type='vespo' does not compose with .*whole-sequence ratio"),
    "sequence-ratio": (
        dict(importance_sampling_level="sequence"),
        "importance_sampling_level='sequence' does not compose with .*one weight per response",
    ),
    "delta": (dict(delta=4.0), "delta=4.0 does not compose with .*set dual_clip=4.0 instead"),
    "top-entropy": (
        dict(top_entropy_quantile=0.2),
        "top_entropy_quantile=0.2 does not compose with .*token_credit=\\['high_entropy'\\] with .*'rho': 0.2",
    ),
    "off-policy-mask": (dict(off_policy_mask_threshold=0.5), "off_policy_mask_threshold=0.5 does not compose with"),
    "adaptive-entropy": (dict(use_adaptive_entropy=True), "use_adaptive_entropy=True does not compose with"),
}


@pytest.mark.parametrize("feature", FEATURES.values(), ids=FEATURES.keys())
@pytest.mark.parametrize(("option", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_options_that_do_not_compose_are_refused_with_the_reason(tmp_path, feature, option, message):
    with pytest.raises(ValueError, match=message):
        LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **feature, **option)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(loss_type="cispo", dual_clip=3.0), "loss_type='cispo' does not compose with dual_clip"),
        (dict(loss_type="sapo", token_credit=["high_entropy"]), "loss_type='sapo' does not compose with token_credit"),
    ],
)
def test_own_surrogates_refuse_what_belongs_to_the_clipped_one(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **settings)


def test_the_trainers_own_credit_steps_count_as_a_feature(tiny_model_dir, kk_prompts, tmp_path):
    def keep_all(context: CreditContext) -> TokenCredit:
        return TokenCredit(keep=context.response_mask)

    with pytest.raises(ValueError, match="loss_type='vespo' does not compose with token_credit"):
        LoptiGRPOTrainer(
            model=str(tiny_model_dir), reward_funcs=[], token_credit=keep_all, train_dataset=kk_prompts,
            args=LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], loss_type="vespo"),
        )  # fmt: skip


def loss_and_gradient(trainer, compute_loss, inputs):
    """Return the loss `compute_loss(model, inputs)` and the gradient it gives every weight."""
    trainer.model.zero_grad()
    loss = compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.item(), [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in trainer.model.parameters()]


EMPTIED = {
    "grpo": dict(loss_type="grpo"),
    "bnpo": dict(loss_type="bnpo"),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "dapo": dict(loss_type="dapo"),
    "grpo+kl+entropy": dict(loss_type="grpo", beta=0.04, entropy_coef=0.01),
    "sapo+ar": dict(loss_type="sapo", ar_alpha=0.5),
    "luspo+ar": dict(loss_type="luspo", ar_alpha=0.5),
}


@pytest.mark.parametrize("settings", EMPTIED.values(), ids=EMPTIED.keys())
def test_responses_without_loss_tokens_count_as_trl_counts_them(tiny_model_dir, kk_prompts, tmp_path, settings):
    """TRL's mask_truncated_completions leaves a truncated response no loss token: TRL's per-response means count it
    as a zero, and a micro-batch of such responses has a zero loss. Lopti's loss and gradient are TRL's on the same
    batch (with AR, TRL's given the AR-weighted advantages; on-policy, so π_old is the loss pass's π)."""
    trainer, batch = trainer_and_batch(tiny_model_dir, kk_prompts, tmp_path, **settings)
    credit = 0.5 * trainer._latest_logps.exp() + 0.5 if trainer.args.ar_alpha else torch.ones(1)
    trl_loss = lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs)  # noqa: E731
    for emptied in (slice(0, None, 2), slice(None)):  # half the responses, then all of them
        batch["completion_mask"] = batch["completion_mask"].clone()
        batch["completion_mask"][emptied] = 0
        lopti_loss, lopti_grads = loss_and_gradient(trainer, trainer._compute_loss, batch)
        credited = {**batch, "advantages": batch["advantages"][:, None] * credit}
        expected_loss, expected_grads = loss_and_gradient(trainer, trl_loss, credited)
        assert lopti_loss == pytest.approx(expected_loss, abs=1e-7)
        for ours, theirs in zip(lopti_grads, expected_grads, strict=True):
            torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-6)
    assert lopti_loss == 0.0


def test_kl_far_from_the_reference_is_trls_with_lopti_off_and_the_authors_clamped_one_with_lopti_on(
    tiny_model_dir, kk_prompts, tmp_path
):
    """Tokens 8 nats from the reference: lopti's loss and gradient equal GRPOTrainer's with lopti's features off;
    with AR on, the k3 term is the authors' (log(π_ref/π) clamped to ±5), so the loss is smaller than TRL's."""
    losses = {}
    for name, settings in {"off": {}, "ar": dict(ar_alpha=1e-6)}.items():
        trainer, batch = trainer_and_batch(tiny_model_dir, kk_prompts, tmp_path / name, beta=0.5,
                                           use_bias_correction_kl=True, loss_type="dapo", **settings)  # fmt: skip
        batch["ref_per_token_logps"] = trainer._latest_logps - 8.0  # the reference far below the policy
        trl_loss = partial(GRPOTrainer._compute_loss, trainer)
        lopti = loss_and_gradient(trainer, trainer._compute_loss, batch)
        losses[name] = lopti, loss_and_gradient(trainer, trl_loss, batch)
    (ours, our_grads), (theirs, their_grads) = losses["off"]
    assert ours == pytest.approx(theirs, abs=1e-6)
    for mine, trls in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(mine, trls, atol=1e-6, rtol=1e-5)
    (clamped, _), (unclamped, _) = losses["ar"]
    k3 = lambda log_ref_over_pi: math.exp(log_ref_over_pi) - log_ref_over_pi - 1  # noqa: E731
    assert clamped == pytest.approx(unclamped - 0.5 * (k3(-8.0) - k3(-5.0)), abs=1e-4)  # β = 0.5, every token


@pytest.mark.parametrize("cpu_fast_path", [False, True], ids=["trl-forward", "fast-path"])
def test_truncated_completions_masked_train_like_grpo(tiny_model_dir, kk_prompts, tmp_path, cpu_fast_path):
    """The tiny model's completions all reach max_completion_length: TRL's mask_truncated_completions leaves no
    loss token, and both trainers take the same (zero) steps."""
    settings = dict(loss_type="grpo", mask_truncated_completions=True, num_iterations=2)
    plain, ours = train_both(tiny_model_dir, kk_prompts, tmp_path, settings, cpu_fast_path=cpu_fast_path)
    assert set(logged(plain, "completions/clipped_ratio")) == {1.0}
    assert_trains_like_grpo(plain, ours, FAST_PATH if cpu_fast_path else EXACT)


def test_truncated_completions_masked_with_lopti_features_train(tiny_model_dir, kk_prompts, tmp_path):
    """With AR, Lopti, lopti's advantages and the update-quality metrics on, a generated batch without a loss token
    trains zero steps instead of stopping."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=2,
                   mask_truncated_completions=True, ar_alpha=0.3, lopti=True, num_iterations=2,
                   advantage_estimator="grpo", update_quality_every=1)  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 2
    assert logged(trainer, "loss") == [0.0, 0.0] and logged(trainer, "grad_norm") == [0.0, 0.0]


def off_policy_batch(trainer, prompts):
    """Return one batch whose old and reference log-probs are off the current ones (r ≠ 1, a non-zero KL)."""
    batch = one_batch(trainer, prompts)
    with torch.no_grad():
        trainer._compute_loss(trainer.model, batch)
    logps = trainer._latest_logps
    shift = torch.linspace(-0.3, 0.3, logps.numel()).view_as(logps)
    return {**batch, "old_per_token_logps": logps + shift, "ref_per_token_logps": logps - 2 * shift}


@pytest.mark.parametrize("loss_type", ["cispo", "sapo"])
def test_cispo_and_sapo_compose_with_the_kl_estimators_and_the_entropy_bonus(peaked_model_dir, kk_prompts, tmp_path,
                                                                             loss_type):  # fmt: skip
    """docs/guides/trl.md: with AR, k3's KL and the entropy bonus, the loss and gradient are TRL's for the loss type
    given the AR-weighted advantages; another estimator changes only the KL term: by β × k2 − k3, aggregated as the
    loss type aggregates (k2 = ½ d², k3 = e^(−d) + d − 1, d = log π − log π_ref)."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path, max_steps=1,
                   loss_type=loss_type, epsilon_high=1.05, ar_alpha=0.5, beta=0.04,
                   entropy_coef=0.01)  # fmt: skip
    batch = off_policy_batch(trainer, kk_prompts)
    credited = {**batch, "advantages": batch["advantages"][:, None] * (0.5 * batch["old_per_token_logps"].exp() + 0.5)}
    k3_loss, k3_grads = loss_and_gradient(trainer, trainer._compute_loss, batch)
    trl_loss = lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs)  # noqa: E731
    expected_loss, expected_grads = loss_and_gradient(trainer, trl_loss, credited)
    assert k3_loss == pytest.approx(expected_loss, abs=1e-6)
    for ours, theirs in zip(k3_grads, expected_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    trainer.args.kl_estimator = "k2"
    k2_loss, _ = loss_and_gradient(trainer, trainer._compute_loss, batch)
    with torch.no_grad():
        trainer._compute_loss(trainer.model, batch)
    d = trainer._latest_logps - batch["ref_per_token_logps"]
    mask = batch["completion_mask"].float()
    gap = (0.5 * d.square() - (torch.exp(-d) + d - 1)) * mask
    aggregated = gap.sum() / batch["num_items_in_batch"] if loss_type == "cispo" else (gap.sum(1) / mask.sum(1)).mean()
    assert abs(aggregated.item()) > 1e-3, "the estimators must differ for the test to see it"
    assert k2_loss - k3_loss == pytest.approx(0.04 * aggregated.item(), abs=1e-6)


def test_luspo_composes_with_credit_presets(peaked_model_dir, kk_prompts, tmp_path):
    """The refusal of presets with cispo and sapo points to luspo: with W-REINFORCE's weights (positive advantages
    × 0.1) and STAPO's dropped tokens (out of every term and the denominators), the loss and gradient are TRL's
    LUSPO given the weighted advantages and a loss mask without the dropped tokens."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path, max_steps=1,
                   loss_type="luspo", token_credit=["w_reinforce", "stapo"],
                   token_credit_kwargs={"stapo": {"prob_threshold": 0.5, "entropy_quantile": 1.0}})  # fmt: skip
    batch = off_policy_batch(trainer, kk_prompts)
    decisions = []
    objective = trainer._objective
    trainer._objective = lambda *args: decisions.append(objective(*args)) or decisions[-1]
    lopti_loss, lopti_grads = loss_and_gradient(trainer, trainer._compute_loss, batch)
    dropped = decisions[0].credit["stapo"].drop
    mask = batch["completion_mask"].bool()
    assert 0 < (dropped & mask).sum() < mask.sum(), "STAPO must drop some tokens, not all"
    advantages = batch["advantages"][:, None].expand_as(dropped)
    weighted = advantages * torch.where(advantages > 0, 0.1, 1.0)
    # TRL's loss leaves out the tokens of its tool mask, which, unlike the completion mask, the forward attends to
    credited = {**batch, "advantages": weighted, "tool_mask": (~dropped).long()}
    trl_loss = lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs)  # noqa: E731
    expected_loss, expected_grads = loss_and_gradient(trainer, trl_loss, credited)
    assert lopti_loss == pytest.approx(expected_loss, abs=1e-7)
    for ours, theirs in zip(lopti_grads, expected_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-6)


def test_dual_clip_is_trls_delta(peaked_model_dir, kk_prompts, tmp_path):
    """The refusal of `delta` with lopti's features says to set dual_clip=delta: for δ > 1 + ε_high, TRL's two-sided
    clip −min(min(r, δ)·Â, clip(r)·Â) is the dual-clip loss with c = δ, loss and gradient."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path, max_steps=1,
                   epsilon=0.05, dual_clip=1.1)  # fmt: skip
    batch = off_policy_batch(trainer, kk_prompts)
    ratio = (trainer._latest_logps - batch["old_per_token_logps"]).exp()
    assert ((ratio > 1.1) & (batch["advantages"][:, None] < 0) & batch["completion_mask"].bool()).any()
    lopti_loss, lopti_grads = loss_and_gradient(trainer, trainer._compute_loss, batch)

    def trl_loss(model, inputs):
        return GRPOTrainer._compute_loss(trainer, model, inputs)

    unclipped_loss, _ = loss_and_gradient(trainer, trl_loss, batch)
    trainer.args.delta = 1.1  # TRL's loss reads it from the config
    expected_loss, expected_grads = loss_and_gradient(trainer, trl_loss, batch)
    assert abs(unclipped_loss - expected_loss) > 1e-4, "δ must bind for the test to see it"
    assert lopti_loss == pytest.approx(expected_loss, abs=1e-7)
    for ours, theirs in zip(lopti_grads, expected_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-6)
