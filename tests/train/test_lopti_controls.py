"""Lopti's controls in LoptiGRPOTrainer: `lopti_split="none"` (grpo2, GRPO with two passes per generated batch)
and `lopti_split="random"` (lopti_random, a random split of Lopti's sizes), on the tiny model."""

import torch
from test_trainer import Probe, logged, make  # pytest puts each test folder on sys.path

from lopti.core import phase_masks, random_phase_masks, split_seed
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer


class Recorder(Probe):
    """Probe that also records each generated batch (its prompts and completions) and each micro-step's split seed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generated, self.seeds = [], []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.generated.append(([row["prompt"] for row in inputs], output["completion_ids"].clone()))
        return output

    def training_step(self, model, inputs, num_items_in_batch):
        self.seeds.append(self.lopti_split_seed())
        return super().training_step(model, inputs, num_items_in_batch)


SMALL = dict(learning_rate=1e-3, per_device_train_batch_size=8)


def test_grpo2_takes_twice_grpos_optimizer_steps_on_the_same_generated_batches(peaked_model_dir, kk_prompts, tmp_path):
    grpo = make(Recorder, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path / "grpo", max_steps=2, **SMALL)
    grpo.train()
    grpo2 = make(
        Recorder, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path / "grpo2",
        max_steps=4, lopti=True, num_iterations=2, lopti_split="none", **SMALL,
    )  # fmt: skip
    grpo2.train()
    assert (grpo.state.global_step, len(grpo.generated)) == (2, 2)
    assert (grpo2.state.global_step, len(grpo2.generated)) == (4, 2)
    assert [r["phase"] for r in grpo2.records] == [0, 1, 0, 1]
    # the same prompts in each generated batch; the first one also sampled from the same weights
    assert [prompts for prompts, _ in grpo2.generated] == [prompts for prompts, _ in grpo.generated]
    assert torch.equal(grpo2.generated[0][1], grpo.generated[0][1])
    for first, second in (grpo2.records[0:2], grpo2.records[2:4]):
        assert torch.equal(first["old"], second["old"]) and torch.equal(first["mask"], second["mask"])
        low, high = phase_masks(first["old"], first["mask"], 0.5)
        assert low.any() and high.any(), "the test needs tokens Lopti would give to either pass"
        signal = (first["advantages"] != 0)[:, None] & first["mask"]
        for record in (first, second):  # every unclipped token with an advantage has a gradient in both passes
            ratio = (record["logps"] - record["old"]).exp()
            unclipped = signal & ((ratio - 1).abs() < 0.2)
            assert (unclipped & low).any() and (unclipped & high).any()
            assert torch.all(record["grad"][unclipped] != 0) and torch.all(record["grad"][~first["mask"]] == 0)
    assert logged(grpo2, "lopti/phase2_loss") and not logged(grpo2, "lopti/dlogp_phase1_tokens")


def test_grpo2_trains_exactly_as_trls_two_passes_on_every_token(tiny_model_dir, kk_prompts, tmp_path):
    runs = {}
    for name, lopti in (("trl", dict()), ("grpo2", dict(lopti=True, lopti_split="none"))):
        runs[name] = make(
            LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path / name,
            max_steps=4, num_iterations=2, beta=0.04, **lopti,
        )  # fmt: skip
        runs[name].train()
    assert logged(runs["grpo2"], "loss") == logged(runs["trl"], "loss")
    for p, q in zip(runs["trl"].model.parameters(), runs["grpo2"].model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_lopti_random_splits_each_micro_batch_at_random_in_lopti_sizes(peaked_model_dir, kk_prompts, tmp_path):
    trainer = make(
        Recorder, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path,
        max_steps=4, lopti=True, num_iterations=2, lopti_split="random", **SMALL,
    )  # fmt: skip
    trainer.train()
    records, seeds = trainer.records, trainer.seeds
    # one seed per generated batch (and micro-batch), the same in both passes, from the seed and the RL step
    assert seeds == [split_seed(0, 0, 0, 0)] * 2 + [split_seed(0, 1, 0, 0)] * 2 and seeds[0] != seeds[2]
    for k, (first, second) in enumerate((records[0:2], records[2:4])):
        assert torch.equal(first["old"], second["old"]) and torch.equal(first["mask"], second["mask"])
        low = phase_masks(first["old"], first["mask"], 0.5)[0]
        drawn, rest = random_phase_masks(first["old"], first["mask"], seeds[2 * k], 0.5)
        assert drawn.sum() == low.sum() and not torch.equal(drawn, low)
        signal = (first["advantages"] != 0)[:, None] & first["mask"]
        assert (drawn & signal & ~low).any(), "the drawn tokens should include high-probability ones"
        assert torch.all(first["grad"][~drawn] == 0) and torch.all(first["grad"][drawn & signal] != 0)
        assert torch.all(second["grad"][~rest] == 0) and second["grad"][rest & signal].abs().sum() > 0
    # a resumed run restarts TRL's micro-step counter but not the optimizer steps: it draws the same split
    trainer.state.global_step, trainer._step = 2, 0
    assert trainer.lopti_split_seed() == seeds[2]
