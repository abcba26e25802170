"""`lopti train` end to end on a tiny model: run folder, resume after a kill, bad input."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from lopti.cli import main
from lopti.train import run as run_module
from lopti.train.checkpoints import last_complete_checkpoint
from lopti.train.settings import split


def hash_reward(completions, completion_ids, **kwargs):
    """Different completions get different rewards, so even a random model gets a learning signal."""
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


@pytest.fixture
def settings(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "task_rewards", lambda run, weights, tokenizer=None: ([hash_reward], [1.0]))
    return dict(
        model=str(tiny_model_dir), template="compact", people="3", train_puzzles=32, eval_puzzles=4,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=16, max_steps=4,
        save_strategy="steps", save_steps=2, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e-2, seed=0, lopti=True, num_iterations=2, ar_alpha=0.3, disable_tqdm=True,
        output_dir=str(tmp_path / "run"),
    )  # fmt: skip


def train(settings):
    run, trainer_kwargs = split(settings)
    return run_module.train(run, trainer_kwargs, settings)


class Kill(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise KeyboardInterrupt("simulated kill after checkpoint-2")


def metric_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resumed_run_ends_like_an_uninterrupted_one(settings, tmp_path, monkeypatch):
    whole = train({**settings, "output_dir": str(tmp_path / "whole")})
    assert {"config.yaml", "metrics.jsonl", "final", "checkpoint-2", "checkpoint-4"} <= {
        p.name for p in whole.iterdir()
    }

    build = run_module.build_trainer

    def build_with_kill(run, kwargs):
        trainer = build(run, kwargs)
        trainer.add_callback(Kill())
        return trainer

    monkeypatch.setattr(run_module, "build_trainer", build_with_kill)
    with pytest.raises(KeyboardInterrupt):
        train({**settings, "output_dir": str(tmp_path / "split")})
    monkeypatch.setattr(run_module, "build_trainer", build)
    # a kill in the middle of saving checkpoint-4 leaves a folder without trainer_state.json
    partial = tmp_path / "split" / "checkpoint-4"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"truncated")
    assert last_complete_checkpoint(tmp_path / "split").name == "checkpoint-2"
    resumed = train({**settings, "output_dir": str(tmp_path / "split"), "resume": True})

    first = AutoModelForCausalLM.from_pretrained(whole / "final")
    second = AutoModelForCausalLM.from_pretrained(resumed / "final")
    start = AutoModelForCausalLM.from_pretrained(settings["model"])
    assert any(not torch.equal(p, s) for p, s in zip(first.parameters(), start.parameters(), strict=True))
    for p, q in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(p, q)
    keys = ("step", "loss", "reward", "grad_norm")
    assert [[m.get(k) for k in keys] for m in metric_lines(resumed)] == [
        [m.get(k) for k in keys] for m in metric_lines(whole)
    ]


def test_refuses_to_overwrite_or_resume_nothing(settings, tmp_path):
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        train({**settings, "resume": True})
    train({**settings, "max_steps": 2})
    with pytest.raises(ValueError, match="already holds checkpoints; pass --resume"):
        train(settings)


def test_cli_bad_input_is_one_line_before_compute(tmp_path, capsys):
    assert main(["train", "--learning_rte", "1e-5"]) == 2
    assert main(["train", "--model", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "r")]) == 2
    assert main(["train", "--per_device_train_batch_size", "6", "--output_dir", str(tmp_path / "r")]) == 2
    assert main(["train", "--config", str(tmp_path / "none.yaml")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "unknown key(s) 'learning_rte' (did you mean learning_rate" in lines[0]
    assert "is neither an existing folder" in lines[1]
    assert "× steps_per_generation 1 = 6; make it a multiple of 8" in lines[2]
    assert "config file" in lines[3] and "does not exist" in lines[3]


def test_lora_run_saves_an_adapter(settings):
    run_dir = train({**settings, "lora_r": 4, "max_steps": 2, "lopti": False, "num_iterations": 1})
    assert (run_dir / "final" / "adapter_config.json").is_file()
    assert json.loads((run_dir / "final" / "adapter_config.json").read_text())["r"] == 4


def test_evaluate_before_and_after_writes_a_report(settings):
    run_dir = train({**settings, "evaluate": True, "eval_max_new_tokens": 8, "max_steps": 2, "eval_samples": 3})
    before = json.loads((run_dir / "eval_before.json").read_text())
    assert before["overall"]["n"] == 4 and before["group"] == "people" and set(before["per_group"]) == {"3"}
    report = (run_dir / "report.md").read_text()
    assert "| 3 | 4 |" in report and "accuracy before" in report and "Wall time" in report
    sampled = json.loads((run_dir / "eval_after_sampled.json").read_text())
    assert (sampled["samples"], sampled["temperature"], sampled["overall"]["n"]) == (3, 1.0, 4)
    assert "3 samples per prompt at T=1.0" in report and "| 3 | " in report.split("pass@3 before")[1]
