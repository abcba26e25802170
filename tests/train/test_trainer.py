"""LoptiGRPOTrainer against plain TRL GRPOTrainer on a tiny model (CPU, seconds)."""

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from lopti.cpu import CpuLoptiGRPOTrainer, trainer_class
from lopti.train.config import LoptiGRPOConfig
from lopti.train.guards import explain_reward_errors
from lopti.train.trainer import LoptiGRPOTrainer


def id_reward(completions, completion_ids, **kwargs):
    """A reward with spread even for a random model: a hash of the token ids, so different completions differ."""
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


COMMON = dict(
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=8,
    learning_rate=1e-2,
    adam_epsilon=1e-6,
    use_cpu=True,
    bf16=False,
    report_to=[],
    logging_steps=1,
    seed=0,
    save_strategy="no",
    disable_tqdm=True,
)


def load(folder):
    """Return the model and processing class saved in `folder`: a vision-language model and its processor where
    the folder holds a processor, else a causal LM and its tokenizer."""
    if (Path(folder) / "processor_config.json").exists():
        return AutoModelForImageTextToText.from_pretrained(folder), AutoProcessor.from_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def make(trainer_cls, config_cls, folder, prompts, tmp_path, **overrides):
    args = config_cls(output_dir=str(tmp_path / trainer_cls.__name__), **{**COMMON, **overrides})
    model, processing_class = load(folder)
    return trainer_cls(
        model=model, reward_funcs=[id_reward], args=args, train_dataset=prompts, processing_class=processing_class
    )


class SameTokensCpuTrainer(CpuLoptiGRPOTrainer):
    """CpuLoptiGRPOTrainer whose rollout draws generate's very tokens for the seed (`draws_like_generate`), so that a
    run compares with TRL's own paths number by number; `lopti train` draws from the same distribution by inverse
    CDF."""

    draws_like_generate = True


def lopti_trainer(cpu_fast_path: bool) -> type[LoptiGRPOTrainer]:
    """Return the trainer `lopti train` takes on the CPU for its `cpu_fast_path` setting, drawing generate's tokens:
    CpuLoptiGRPOTrainer (the CPU fast path) or LoptiGRPOTrainer (TRL's own forwards)."""
    chosen = trainer_class(torch.device("cpu"), cpu_fast_path)
    return SameTokensCpuTrainer if chosen is CpuLoptiGRPOTrainer else chosen


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


# What "trains like GRPOTrainer" means: with TRL's padded forward (LoptiGRPOTrainer) lopti's objective gives
# TRL's losses and gradients to the last float bits; the CPU fast path (packed forwards, its sampling loop) gives
# the same rollouts and the same numbers up to float rounding. Adam divides each gradient by its own running scale,
# so a weight whose gradient is near zero turns rounding into a full step; COMMON's adam_epsilon of 1e-6 (TRL's
# default 1e-8) bounds that, leaving about 1e-5 in the weights here. docs/guides/trl.md states these tolerances.
EXACT = dict(loss=1e-7, grad_norm=1e-5, weights=1e-5)
FAST_PATH = dict(loss=1e-6, grad_norm=1e-4, weights=1e-4)


@pytest.mark.parametrize(
    "settings",
    [
        dict(loss_type="dapo", beta=0.0),
        dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=False),  # the paper's KL, lopti's default
        dict(loss_type="bnpo", beta=0.04, use_bias_correction_kl=True, gradient_accumulation_steps=2),  # TRL's
        dict(loss_type="dr_grpo", beta=0.0, num_iterations=2),
    ],
    ids=["dapo", "grpo+kl", "bnpo+accumulation", "dr_grpo+two-passes"],
)
@pytest.mark.parametrize("cpu_fast_path", [False, True], ids=["trl-forward", "fast-path"])
def test_matches_plain_grpo_when_ar_and_lopti_are_off(tiny_model_dir, kk_prompts, tmp_path, settings, cpu_fast_path):
    plain = make(GRPOTrainer, GRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=3, **settings)
    plain.train()  # build each trainer right before training: construction and training both draw random numbers
    ours = make(
        lopti_trainer(cpu_fast_path),
        LoptiGRPOConfig,
        tiny_model_dir,
        kk_prompts,
        tmp_path,
        max_steps=3,
        **settings,
    )
    ours.train()
    tolerance = FAST_PATH if cpu_fast_path else EXACT
    assert logged(ours, "num_tokens") == logged(plain, "num_tokens")  # the same rollouts
    assert logged(ours, "loss") == pytest.approx(logged(plain, "loss"), abs=tolerance["loss"])
    assert logged(ours, "grad_norm") == pytest.approx(logged(plain, "grad_norm"), rel=tolerance["grad_norm"])
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    moved = max((p - s).abs().max().item() for p, s in zip(plain.model.parameters(), start.parameters(), strict=True))
    assert moved > 1e-3, "the comparison needs parameter updates"
    for p, q in zip(plain.model.parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=tolerance["weights"], rtol=0)


def one_batch(trainer, prompts):
    """Return one prepared training batch, for tests that call the loss directly."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train()
    return trainer._prepare_inputs([prompts[i] for i in range(4) for _ in range(4)])


class Probe(LoptiGRPOTrainer):
    """Records, per micro-step, the phase, π_old, the gradient w.r.t. the token log-probs and the weights."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if logps is not None and logps.requires_grad:  # None: the old log-probs' forward, skipped
            logps.retain_grad()
            self._probe_logps, self._probe_entropies = logps, entropies
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        self._probe_inputs = inputs
        return super()._compute_loss(model, inputs)

    def training_step(self, model, inputs, num_items_in_batch):
        phase = self.lopti_phase()
        weights_before = [p.detach().clone() for p in model.parameters()]
        loss = super().training_step(model, inputs, num_items_in_batch)
        inputs = self._probe_inputs
        self.records.append(
            dict(
                phase=phase,
                old=inputs.get("old_per_token_logps"),
                mask=inputs["completion_mask"].bool(),
                grad=self._probe_logps.grad.clone(),
                logps=self._probe_logps.detach().clone(),
                weights_before=weights_before,
                advantages=inputs["advantages"],
            )
        )
        return loss


def test_lopti_updates_low_tokens_then_high_tokens_from_updated_weights(peaked_model_dir, kk_prompts, tmp_path):
    trainer = make(
        Probe, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path,
        max_steps=4, lopti=True, num_iterations=2, lopti_eta=0.5, beta=0.04, learning_rate=1e-3,
        per_device_train_batch_size=8,
    )  # fmt: skip
    trainer.train()
    records = trainer.records
    assert [r["phase"] for r in records] == [0, 1, 0, 1]
    for first, second in (records[0:2], records[2:4]):
        low = first["mask"] & (first["old"].exp() < 0.5)
        high = first["mask"] & ~low
        assert low.any() and high.any(), "the test needs both groups"
        # the same batch and the same π_old in both phases
        assert torch.equal(first["old"], second["old"]) and torch.equal(first["mask"], second["mask"])
        # phase 1's gradient only from low tokens, phase 2's only from high tokens
        signal = (first["advantages"] != 0)[:, None].expand_as(low)
        assert (low & signal).any() and (high & signal).any(), "the test needs advantages on both groups"
        assert torch.all(first["grad"][~low] == 0) and torch.all(first["grad"][low & signal] != 0)
        assert torch.all(second["grad"][~high] == 0) and second["grad"][high & signal].abs().sum() > 0
        # phase 2 starts from the weights phase 1 produced
        changed = any(
            not torch.equal(a, b) for a, b in zip(first["weights_before"], second["weights_before"], strict=True)
        )
        assert changed


def test_high_first_reverses_the_order(peaked_model_dir, kk_prompts, tmp_path):
    trainer = make(
        Probe, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path,
        max_steps=2, lopti=True, num_iterations=2, lopti_order="high_first",
    )  # fmt: skip
    trainer.train()
    first, second = trainer.records
    low = first["mask"] & (first["old"].exp() < 0.5)
    assert low.any() and (first["mask"] & ~low).any()
    assert torch.all(first["grad"][low] == 0) and torch.all(second["grad"][~low] == 0)


def test_ar_gradient_is_the_weight_times_the_plain_gradient(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(Probe, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1)
    batch = one_batch(trainer, kk_prompts)
    alpha = 0.6
    grads = {}
    for value in (0.0, alpha):
        trainer.args.ar_alpha = value
        trainer.model.zero_grad()
        trainer.compute_loss(trainer.model, batch).backward()
        grads[value] = trainer._probe_logps.grad.clone()
        old = trainer._probe_logps.detach()
    weight = alpha * old.exp() + 1 - alpha
    assert grads[0.0].abs().sum() > 0
    torch.testing.assert_close(grads[alpha], weight * grads[0.0])


def test_entropy_bonus_under_lopti_is_divided_by_every_response_token(peaked_model_dir, kk_prompts, tmp_path):
    # The authors mask the entropy to the phase's tokens but keep the policy term's denominator (all
    # response tokens), so the bonus is Σ H·[phase] / #tokens, not the phase's own token mean.
    trainer = make(
        Probe, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path,
        max_steps=1, lopti=True, num_iterations=2, loss_type="bnpo",
    )  # fmt: skip
    batch = one_batch(trainer, kk_prompts)
    assert trainer.lopti_phase() == 0
    losses = {}
    for coef in (0.0, 0.5):
        trainer.args.entropy_coef = coef
        losses[coef] = trainer.compute_loss(trainer.model, batch).item()
    mask = batch["completion_mask"].bool()
    low = mask & (batch["old_per_token_logps"] < math.log(0.5))
    assert 0 < low.sum() < mask.sum(), "the test needs both token groups"
    entropies = trainer._probe_entropies.detach()
    expected = -0.5 * (entropies * low).sum().item() / mask.sum().item()
    assert losses[0.5] - losses[0.0] == pytest.approx(expected, rel=1e-4)


def test_default_kl_is_the_papers_k3_without_a_ratio_factor(tiny_model_dir, kk_prompts, tmp_path):
    # With only the KL term left, d loss / d log π = β (1 − π_ref/π) / #tokens for the paper's k3; TRL's
    # bias correction (× π/π_old) would add β·k3 / #tokens. A reference 0.5 above log π makes them differ.
    trainer = make(
        Probe, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1, beta=0.04, loss_type="bnpo"
    )
    batch = one_batch(trainer, kk_prompts)
    batch["advantages"] = torch.zeros_like(batch["advantages"])
    trainer.compute_loss(trainer.model, batch)
    batch["ref_per_token_logps"] = trainer._probe_logps.detach() + 0.5
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    mask = batch["completion_mask"].float()
    log_ref_over_pi = batch["ref_per_token_logps"] - trainer._probe_logps.detach()
    k3 = log_ref_over_pi.exp() - log_ref_over_pi - 1.0
    assert loss.item() == pytest.approx(0.04 * (k3 * mask).sum().item() / mask.sum().item(), rel=1e-5)
    expected = 0.04 * (1.0 - log_ref_over_pi.exp()) * mask / mask.sum()
    torch.testing.assert_close(trainer._probe_logps.grad, expected)


def test_paper_estimator_replaces_trl_advantages(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(
        Probe, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1, advantage_estimator="grpo"
    )
    trainer.train()
    record = trainer.records[0]
    advantages = record["advantages"]
    assert advantages.shape == record["mask"].shape
    assert torch.all(advantages[~record["mask"]] == 0)
    # per response, one value; per group of 4 the paper's normalisation gives unit unbiased std (or all zeros)
    per_response = advantages[:, 0]
    std = per_response.std().item()
    assert std == pytest.approx(1.0, abs=1e-3) or per_response.abs().max() == 0


def test_reward_errors_name_function_and_sample():
    def fragile(prompts, completions, answer, **kwargs):
        return [1.0 / int(a) for a in answer]

    wrapped = explain_reward_errors(fragile)
    assert wrapped(prompts=["p"] * 2, completions=["c"] * 2, answer=["1", "2"], trainer_state=None) == [1.0, 0.5]
    with pytest.raises(RuntimeError, match=r"reward function 'fragile' raised on sample 2 .*ZeroDivisionError"):
        wrapped(prompts=["p"] * 3, completions=["c"] * 3, answer=["1", "2", "0"], trainer_state=None)


def test_reward_errors_surface_from_training(tiny_model_dir, kk_prompts, tmp_path):
    def fragile(completions, **kwargs):
        raise KeyError("no such column")

    args = LoptiGRPOConfig(output_dir=str(tmp_path / "f"), **{**COMMON, "max_steps": 1})
    trainer = LoptiGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=[fragile],
        args=args,
        train_dataset=kk_prompts,
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    with pytest.raises(
        RuntimeError, match=r"reward function 'fragile' raised KeyError: 'no such column' on completion"
    ):
        trainer.train()


def test_probability_metrics_per_step(peaked_model_dir, kk_prompts, tmp_path):
    trainer = make(
        Probe, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path,
        max_steps=2, lopti=True, num_iterations=2, learning_rate=1e-3, probability_buckets=[0, 0.5, 1],
    )  # fmt: skip
    trainer.train()
    first = trainer.records[0]
    low_share = (first["mask"] & (first["old"].exp() < 0.5)).sum().item() / first["mask"].sum().item()
    low, high = logged(trainer, "probs/share_[0.00,0.50)"), logged(trainer, "probs/share_[0.50,1.00]")
    assert low[0] == pytest.approx(low_share) and low[0] + high[0] == pytest.approx(1.0)
    assert 0 < low_share < 1, "the test needs both buckets"
    grad_low, grad_high = (
        logged(trainer, "probs/grad_share_[0.00,0.50)"),
        logged(trainer, "probs/grad_share_[0.50,1.00]"),
    )
    assert grad_low[0] + grad_high[0] == pytest.approx(1.0) and grad_low[0] > low[0]  # low tokens carry more
    # logged in phase 2 only: phase 1 moved its own (low) tokens, and the high ones through shared weights
    moved_low, moved_high = logged(trainer, "lopti/dlogp_phase1_tokens"), logged(trainer, "lopti/dlogp_phase2_tokens")
    assert len(moved_low) == 1 and moved_low[0] > 0 and moved_high[0] > 0
