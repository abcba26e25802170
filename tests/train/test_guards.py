"""TrainingGuard: non-finite rewards and losses skip their whole update and stop at the limit; diverging
weights stop the run before anything is saved, in one line."""

import asyncio
import logging
import math

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from lopti.cli import main
from lopti.commands import train_run as run_module
from lopti.errors import TrainingStopped
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer


def id_reward(completions, completion_ids, **kwargs):
    """A reward with spread even for a random model: a hash of the token ids."""
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


class Snapshots(TrainerCallback):
    """Keep a copy of the weights after every optimizer step."""

    def __init__(self):
        self.weights = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights[state.global_step] = [p.detach().clone() for p in model.parameters()]


def make(folder, prompts, tmp_path, reward, **overrides):
    settings = dict(
        per_device_train_batch_size=4, num_generations=4, max_completion_length=8, learning_rate=1e-2,
        use_cpu=True, bf16=False, report_to=[], logging_steps=1, seed=0, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    return LoptiGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        reward_funcs=[reward],
        args=LoptiGRPOConfig(output_dir=str(tmp_path / "out"), **{**settings, **overrides}),
        train_dataset=prompts,
        processing_class=AutoTokenizer.from_pretrained(folder),
    )


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


@pytest.mark.parametrize("estimator", [None, "grpo"], ids=["trl-advantages", "paper-advantages"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_reward_skips_its_updates_then_stops(bad, estimator, tiny_model_dir, kk_prompts, tmp_path, caplog):
    def flaky(completions, completion_ids, **kwargs):
        values = id_reward(completions, completion_ids)
        flaky.calls += 1
        if flaky.calls > 1:  # every generated batch after the first
            values[1] = bad
        return values

    flaky.calls = 0
    trainer = make(
        tiny_model_dir, kk_prompts, tmp_path, flaky, max_steps=8, max_nonfinite_losses=3, advantage_estimator=estimator
    )
    start = [p.detach().clone() for p in trainer.model.parameters()]
    snapshots = Snapshots()
    trainer.add_callback(snapshots)
    expected = r"step 4: 3 poisoned update\(s\) in a row \(max_nonfinite_losses=3\); last: reward function 'flaky' "
    expected += f"returned {bad} for sample 1"
    with caplog.at_level(logging.WARNING), pytest.raises(TrainingStopped, match=expected):
        trainer.train()
    assert any(not torch.equal(p, q) for p, q in zip(start, snapshots.weights[1], strict=True)), "step 1 trained"
    # Steps 2 and 3 were skipped: Adam's momentum from step 1 would have moved the weights under a zero loss.
    for step in (2, 3):
        assert all(torch.equal(p, q) for p, q in zip(snapshots.weights[1], snapshots.weights[step], strict=True))
    assert logged(trainer, "lopti/nonfinite_rewards") == [0.0, 1.0, 1.0]  # a count per step, not a mean
    warnings = [r.getMessage() for r in caplog.records if "reward function 'flaky'" in r.getMessage()]
    assert warnings and f"returned {bad} for sample 1 of the batch (1 of 4 non-finite)" in warnings[0]


def test_nonfinite_loss_drops_the_whole_update_and_is_counted(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, id_reward, max_steps=4, max_nonfinite_losses=2)
    model, args, state, control = trainer.model.train(), trainer.args, trainer.state, trainer.control
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    logps = torch.zeros(2, 3, requires_grad=True)

    def micro_steps(*losses):
        for parameter in model.parameters():
            parameter.grad = torch.ones_like(parameter)
        returned = [trainer._guard_nonfinite(torch.tensor(loss), logps).item() for loss in losses]
        trainer._guard.on_pre_optimizer_step(args, state, control, optimizer=optimizer)
        weights = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        moved = any(not torch.equal(p, q) for p, q in zip(weights, model.parameters(), strict=True))
        return returned, moved

    assert micro_steps(1.0, 2.0) == ([1.0, 2.0], True)
    assert trainer._metrics["train"]["lopti/nonfinite_losses"] == [0.0]
    assert micro_steps(1.0, math.nan) == ([1.0, 0.0], False)  # one bad micro-step drops the whole update
    assert trainer._metrics["train"]["lopti/nonfinite_losses"] == [1.0]
    assert micro_steps(1.0) == ([1.0], True)  # a clean step resets the run of skipped ones
    assert micro_steps(math.inf) == ([0.0], False)
    assert trainer._metrics["train"]["lopti/nonfinite_losses"] == [2.0]  # summed until the next log
    with pytest.raises(TrainingStopped, match=r"2 poisoned update\(s\) in a row.*loss was not finite.*learning rate"):
        micro_steps(math.nan)


def test_diverging_learning_rate_stops_before_any_save_in_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_module, "task_rewards", lambda task, run, weights, tokenizer=None: ([id_reward], [1.0]))
    settings = dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="3", train_puzzles=16, eval_puzzles=4,
        num_generations=4, per_device_train_batch_size=4, max_completion_length=8, max_steps=3,
        save_strategy="steps", save_steps=1, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e6, lr_scheduler_type="constant", seed=0, disable_tqdm=True,
    )  # fmt: skip
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(settings))
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--output_dir", str(run_dir)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]  # progress bars, then the end
    assert not any("Traceback" in line or "error" in line.lower() for line in lines[:-1])
    assert lines[-1].startswith("stopped: step 1: the weights grew from norm ")
    assert lines[-1].endswith("nothing from this step was saved; the learning rate (1e+06) is likely too high")
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith("checkpoint") or p.name == "final"]


class Grow(TrainerCallback):
    """Multiply every weight by `factor` right after each optimizer step (a stand-in for a diverging update)."""

    def __init__(self, factor):
        self.factor = factor

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(self.factor)


def test_weight_growth_limit_is_a_setting(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, id_reward, max_steps=2, max_weight_growth=2.0)
    trainer.add_callback(Grow(1.5))  # ×1.5 after step 1 is within ×2; ×2.25 after step 2 is not
    with pytest.raises(TrainingStopped, match=r"^step 2: the weights grew from .* \(max_weight_growth ×2\)"):
        trainer.train()


def test_weight_growth_check_switched_off(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, id_reward, max_steps=2, max_weight_growth=None)
    trainer.add_callback(Grow(100.0))  # ×10⁴ over the run: far past the default limit of ×10
    trainer.train()
    assert trainer.state.global_step == 2


def test_non_finite_log_probs_in_the_loss_are_a_numerical_failure(tiny_model_dir, kk_prompts, tmp_path):
    from test_trainer import make, one_batch

    from lopti.errors import NumericalFailure

    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1, ar_alpha=0.3)
    batch = one_batch(trainer, kk_prompts)
    batch["old_per_token_logps"] = torch.full_like(batch["completion_mask"], float("nan"), dtype=torch.float32)
    with pytest.raises(NumericalFailure, match=r"optimizer step 1: old_logprobs has \d+ non-finite value"):
        trainer.compute_loss(trainer.model, batch)


def test_a_reward_that_raises_stops_training_or_with_skip_counts_as_no_reward(tiny_model_dir, kk_prompts, tmp_path):
    def fragile(completions, completion_ids, **kwargs):
        fragile.calls += 1
        if fragile.calls > 1:  # every call after the first batch's, each sample's alone included
            raise ZeroDivisionError("division by zero")
        return id_reward(completions, completion_ids)

    fragile.calls = 0
    with pytest.raises(TrainingStopped, match=r"^reward function 'fragile' raised ZeroDivisionError"):
        make(tiny_model_dir, kk_prompts, tmp_path, fragile, max_steps=3).train()

    def one_bad(completions, completion_ids, **kwargs):
        if len(completions) == 1 and completion_ids[0] == one_bad.bad:
            raise ValueError("cannot score this one")
        one_bad.bad = one_bad.bad or (completion_ids[1] if len(completions) > 1 else None)
        if len(completions) > 1 and one_bad.bad in completion_ids:
            raise ValueError("cannot score this batch")
        return id_reward(completions, completion_ids)

    one_bad.bad = None
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, one_bad, max_steps=2, reward_errors="skip")
    trainer.train()
    assert sum(logged(trainer, "lopti/reward_errors")) >= 1


def test_an_async_reward_that_raises_or_hangs_stops_training_or_with_skip_scores_no_reward(
    tiny_model_dir, kk_prompts, tmp_path
):
    async def remote(completions, completion_ids, **kwargs):  # a judge behind a network call
        await asyncio.sleep(remote.delay)
        if len(completions) > 1:
            remote.first = completion_ids[0]
        if completion_ids[0] == remote.first:  # the batch, and its first sample alone
            raise ConnectionError("judge unreachable")
        return id_reward(completions, completion_ids)

    remote.delay = 0
    with pytest.raises(TrainingStopped, match=r"^reward function 'remote' raised ConnectionError: judge unreachable"):
        make(tiny_model_dir, kk_prompts, tmp_path, remote, max_steps=1).train()
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, remote, max_steps=1, reward_errors="skip")
    trainer.train()
    assert trainer.state.global_step == 1 and sum(logged(trainer, "lopti/reward_errors")) >= 1
    remote.delay = 30
    with pytest.raises(TrainingStopped, match=r"^reward function 'remote' took more than 0.5 s \(reward_timeout\)"):
        make(tiny_model_dir, kk_prompts, tmp_path, remote, max_steps=1, reward_timeout=0.5).train()
