"""Update quality during training: the logged metrics against a recomputation from saved weights."""

import pytest
import torch
from test_trainer import COMMON, id_reward, logged, make
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from lopti.core.buckets import probability_buckets, update_sums
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer
from lopti.train.update_quality import quality_metrics


def test_sums_and_metrics_by_hand():
    # bucket 0: Â>0 tokens moved +0.2 and −0.1, an Â<0 token moved −0.3; bucket 1: one Â>0 token moved +0.4;
    # a zero-advantage token and a padding token never count
    index = torch.tensor([0, 0, 0, 1, 1, -1])
    delta = torch.tensor([0.2, -0.1, -0.3, 0.4, 5.0, 9.0], dtype=torch.float64)
    advantages = torch.tensor([1.0, 2.0, -1.0, 0.5, 0.0, 1.0])
    sums = update_sums(index, delta, advantages, buckets=2)
    expected = [[2, 1], [1, 1], [0.1, 0.4], [1, 0], [1, 0], [-0.3, 0.0]]
    torch.testing.assert_close(sums, torch.tensor(expected, dtype=torch.float64))
    metrics = quality_metrics(sums, ["low", "high"], "q/")
    assert metrics == pytest.approx(
        {
            "q/correct_pos_low": 0.5, "q/dlogp_pos_low": 0.05, "q/correct_neg_low": 1.0, "q/dlogp_neg_low": -0.3,
            "q/correct_pos_high": 1.0, "q/dlogp_pos_high": 0.4,  # no Â<0 token in "high": nothing logged
            "q/correct_pos_all": 2 / 3, "q/dlogp_pos_all": 0.5 / 3, "q/correct_neg_all": 1.0, "q/dlogp_neg_all": -0.3,
        }
    )  # fmt: skip


class Snapshots(TrainerCallback):
    """Keep the weights before and after every optimizer step, and the generated batch each step used."""

    def __init__(self) -> None:
        self.before, self.after, self.batches = [], [], []

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.before.append({k: v.detach().clone() for k, v in model.state_dict().items()})

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        self.batches.append(self.trainer._buffered_inputs[0])


def logprobs_at(folder, weights, batch, temperature: float) -> torch.Tensor:
    """Return log π of the batch's completion tokens under `weights`: the model's full logits in float64."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.load_state_dict(weights)
    model.double().eval()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -keep - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def test_logged_quality_equals_a_recomputation_from_saved_weights(peaked_model_dir, kk_prompts, tmp_path):
    snapshots = Snapshots()
    args = LoptiGRPOConfig(
        output_dir=str(tmp_path / "run"),
        **{**COMMON, "per_device_train_batch_size": 8, "learning_rate": 1e-3},
        max_steps=4, lopti=True, num_iterations=2, update_quality_every=2, probability_buckets=[0, 0.5, 1],
    )  # fmt: skip
    trainer = LoptiGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(peaked_model_dir),
        reward_funcs=[id_reward],
        args=args,
        train_dataset=kk_prompts,
        processing_class=AutoTokenizer.from_pretrained(peaked_model_dir),
        callbacks=[snapshots],
    )
    snapshots.trainer = trainer
    trainer.train()
    # RL step 1 (optimizer steps 1-2) is not measured; RL step 2 is: phase 1 after step 3, the whole after step 4
    history = trainer.state.log_history
    assert [e["step"] for e in history if "quality/phase1/correct_pos_all" in e] == [3]
    assert [e["step"] for e in history if "quality/correct_pos_all" in e] == [4]
    batch = snapshots.batches[3]
    assert batch is snapshots.batches[2], "both phases of RL step 2 use one generated batch"
    mask = batch["completion_mask"].bool()
    advantages = batch["advantages"][:, None].expand_as(mask).double()
    old = logprobs_at(peaked_model_dir, snapshots.before[2], batch, 1.0)
    index = probability_buckets(old, mask, [0, 0.5, 1])
    assert (index[mask] == 0).any() and (index[mask] == 1).any(), "the test needs both buckets"
    for prefix, weights in (("quality/phase1/", snapshots.after[2]), ("quality/", snapshots.after[3])):
        delta = logprobs_at(peaked_model_dir, weights, batch, 1.0) - old
        counted = mask & (advantages != 0)
        assert delta[counted].abs().min() > 1e-5, "a move within float32 noise (~1e-6) could flip a correct ratio"
        for label, where in (("[0.00,0.50)", index == 0), ("[0.50,1.00]", index == 1), ("all", mask)):
            for sign, side in (("pos", advantages > 0), ("neg", advantages < 0)):
                tokens = where & mask & side
                if not tokens.any():
                    assert not logged(trainer, f"{prefix}correct_{sign}_{label}")
                    continue
                moved_right = (delta[tokens] > 0) if sign == "pos" else (delta[tokens] < 0)
                assert logged(trainer, f"{prefix}correct_{sign}_{label}") == [
                    pytest.approx(moved_right.double().mean().item(), abs=1e-12)
                ]
                assert logged(trainer, f"{prefix}dlogp_{sign}_{label}") == [
                    pytest.approx(delta[tokens].mean().item(), abs=1e-5)
                ]


def test_a_vision_language_model_is_measured_with_its_images(tiny_vision_model_dir, image_prompts, tmp_path):
    """The update-quality forward gets the loss forward's images: with a zero learning rate the update moves
    nothing, so every Δ log π is 0; a forward without the images (the image tokens read as text) would move them."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_vision_model_dir, image_prompts, tmp_path, max_steps=1,
                   learning_rate=0.0, update_quality_every=1)  # fmt: skip
    trainer.train()
    moves = [logged(trainer, f"quality/dlogp_{sign}_all") for sign in ("pos", "neg")]
    assert [len(move) for move in moves] == [1, 1]
    assert moves == [[pytest.approx(0.0, abs=1e-6)]] * 2


def test_settings_that_cannot_be_measured_are_named(tmp_path):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match=r"update_quality_every must be ≥ 0 \(0 = off\), got -1"):
        LoptiGRPOConfig(**base, update_quality_every=-1)
    # three micro-steps per generated batch, an optimizer step every two: a batch would end mid-update
    with pytest.raises(ValueError, match=r"steps_per_generation \(3\) × num_iterations \(1\) must be a multiple"):
        LoptiGRPOConfig(**base, update_quality_every=1, steps_per_generation=3, gradient_accumulation_steps=2)
    assert LoptiGRPOConfig(**base, steps_per_generation=3, gradient_accumulation_steps=2).update_quality_every == 0
