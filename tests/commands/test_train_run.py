"""`lopti train` end to end on a tiny model: run folder, resume after a kill, bad input."""

import contextlib
import json
import logging
import os
import shutil

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, TrainerCallback

from lopti.cli import main
from lopti.commands import held_out
from lopti.commands import settings as settings_module
from lopti.commands import train_run as run_module
from lopti.commands.callbacks import drop_metrics_after
from lopti.commands.provenance import code_version
from lopti.commands.settings import split as split_settings
from lopti.cpu import CpuLoptiGRPOTrainer, evaluation_generation
from lopti.cpu.precision import cpu_kind
from lopti.run_folder import last_complete_checkpoint
from lopti.tasks.registry import get_task
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer, untied_missing_keys


def hash_reward(completions, completion_ids, **kwargs):
    """Different completions get different rewards, so even a random model gets a learning signal."""
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


@pytest.fixture
def settings(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "task_rewards", lambda task, run, weights, tokenizer=None: ([hash_reward], [1.0]))
    return dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="3", train_puzzles=32, eval_puzzles=4,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=16, max_steps=4,
        save_strategy="steps", save_steps=2, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e-2, seed=0, lopti=True, num_iterations=2, ar_alpha=0.3, disable_tqdm=True,
        output_dir=str(tmp_path / "run"),
    )  # fmt: skip


def train(settings):
    return run_module.train(settings)


class Kill(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise KeyboardInterrupt("simulated kill after checkpoint-2")


def train_killed_at_step_3(settings, monkeypatch):
    """Train until a kill after step 3, which leaves checkpoint-2 as the last one."""
    build = run_module.build_trainer

    def build_with_kill(task, run, kwargs):
        training = build(task, run, kwargs)
        training.trainer.add_callback(Kill())
        return training

    monkeypatch.setattr(run_module, "build_trainer", build_with_kill)
    with pytest.raises(KeyboardInterrupt):
        train(settings)
    monkeypatch.setattr(run_module, "build_trainer", build)


def metric_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("split", ["probability", "random"])
def test_resumed_run_ends_like_an_uninterrupted_one(settings, tmp_path, monkeypatch, capsys, split, peaked_model_dir):
    if split == "random":  # the split's seed survives the resume; the peaked model puts tokens on both sides of η
        settings = {**settings, "lopti_split": split, "model": str(peaked_model_dir)}
    whole = train({**settings, "output_dir": str(tmp_path / "whole")})
    assert {"config.yaml", "metrics.jsonl", "final", "checkpoint-2", "checkpoint-4"} <= {
        p.name for p in whole.iterdir()
    }
    train_killed_at_step_3({**settings, "output_dir": str(tmp_path / "split")}, monkeypatch)
    # checkpoint-4 with every file but a cut-short model, as a full disk leaves it: resume falls back
    damaged = shutil.copytree(whole / "checkpoint-4", tmp_path / "split" / "checkpoint-4")
    weights = (damaged / "model.safetensors").read_bytes()
    (damaged / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    assert last_complete_checkpoint(tmp_path / "split").name == "checkpoint-2"
    with (tmp_path / "split" / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 3, "loss": 0.1')  # a kill in the middle of a metrics line
    capsys.readouterr()
    resumed = train({**settings, "output_dir": str(tmp_path / "split"), "resume": True})
    printed = capsys.readouterr().out
    assert "checkpoint-4 not used: model.safetensors is damaged" in printed
    assert "resuming from checkpoint-2" in printed

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
    with pytest.raises(ValueError, match="already holds checkpoints or a finished run; pass --resume"):
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


def test_evaluate_before_and_after_writes_a_report_sampling_the_first_prompts(settings):
    run_dir = train({**settings, "evaluate": True, "eval_max_new_tokens": 8, "max_steps": 2, "eval_samples": 3,
                     "eval_sampled_prompts": 3, "eval_token_probabilities": True})  # fmt: skip
    before = json.loads((run_dir / "eval_before.json").read_text())
    assert before["overall"]["n"] == 4 and before["group"] == "people" and set(before["per_group"]) == {"3"}
    report = (run_dir / "report.md").read_text()
    assert "| 3 | 4 |" in report and "accuracy before" in report and "Wall time" in report
    sampled = json.loads((run_dir / "eval_after_sampled.json").read_text())
    assert (sampled["samples"], sampled["temperature"], sampled["overall"]["n"]) == (3, 1.0, 3)
    assert "3 samples per prompt at T=1.0" in report and "| 3 | 3 |" in report.split("samples per prompt")[1]
    lengths = [n for record in sampled["records"] for n in record["length"]]
    assert [sum(c.values()) for r in sampled["records"] for c in r["token_buckets"]] == lengths
    assert sum(sampled["token_probability_shares"].values()) == pytest.approx(1.0)
    record = json.loads((run_dir / "run.json").read_text())  # where and with which code the run trained, for studies
    machine = record["hardware"]
    assert machine["cores"] == os.cpu_count() and machine["torch"] == torch.__version__ and machine["cpu"]
    assert machine["cpu_kind"] == cpu_kind() and record["code"] == code_version()


def untouched(run_dir):
    """Return what resuming a finished run must leave as it is: checkpoints, metrics and final/'s weights."""
    weights = run_dir / "final" / "model.safetensors"
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    return checkpoints, (run_dir / "metrics.jsonl").read_text(), weights.read_bytes(), weights.stat().st_mtime_ns


def test_resuming_a_finished_run_trains_nothing_and_redoes_only_what_is_lost(settings, capsys):
    settings = {**settings, "evaluate": True, "eval_max_new_tokens": 4}
    run_dir = train(settings)
    finished = untouched(run_dir)
    eval_after = (run_dir / "eval_after.json").read_text()
    assert finished[0] == ["checkpoint-2", "checkpoint-4"]
    # lost to a kill during: nothing (a second --resume), the report, the evaluation after, the final save
    for lost in [(), ("report.md",), ("eval_after.json", "report.md")]:
        for name in lost:
            (run_dir / name).unlink()
        capsys.readouterr()
        train({**settings, "resume": True})
        assert untouched(run_dir) == finished
        assert all((run_dir / name).is_file() for name in lost)
        assert (run_dir / "eval_after.json").read_text() == eval_after
        assert ("nothing left to do" in capsys.readouterr().out) == (not lost)
    weights = run_dir / "final" / "model.safetensors"
    weights.write_bytes(finished[2][:100])
    for name in ("run.json", "eval_after.json", "report.md"):
        (run_dir / name).unlink()
    train({**settings, "resume": True})
    assert "training had ended: only missing outputs are redone" in capsys.readouterr().out
    assert untouched(run_dir)[:3] == finished[:3]  # final/ rewritten with the same weights, nothing trained
    assert json.loads((run_dir / "run.json").read_text())["global_step"] == 4
    assert (run_dir / "eval_after.json").read_text() == eval_after and (run_dir / "report.md").is_file()


def test_resuming_a_finished_run_without_evaluations_does_nothing(settings, capsys):
    run_dir = train(settings)
    finished = untouched(run_dir)
    capsys.readouterr()
    train({**settings, "resume": True})
    assert "nothing left to do" in capsys.readouterr().out
    assert untouched(run_dir) == finished and (run_dir / "README.md").is_file()


def test_cli_resume_continues_with_the_runs_own_settings(settings, tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    train_killed_at_step_3(settings, monkeypatch)
    stored = (run_dir / "config.yaml").read_text()
    # a stand-in for the built-in recipe, which --resume must not use
    builtin = tmp_path / "builtin.yaml"
    builtin.write_text(yaml.safe_dump({**settings, "max_steps": 6, "output_dir": str(tmp_path / "other")}))
    monkeypatch.setattr(settings_module, "default_recipe", lambda task_name=None: builtin)
    resume = ["train", "--resume", "--output_dir", str(run_dir)]
    capsys.readouterr()
    assert main([*resume, "--learning_rate", "0.5"]) == 2
    assert main([*resume, "--max_steps", "2"]) == 2
    assert main(["train", "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert "learning_rate (0.01 there, 0.5 now)" in lines[0] and "max_steps (4 there, 2 now)" in lines[1]
    assert "--resume needs --output_dir, the run folder to continue" in lines[2]
    assert main([*resume, "--disable_tqdm", "true"]) == 0  # touches neither the weights nor the results
    assert json.loads((run_dir / "run.json").read_text())["global_step"] == 4
    assert [m["step"] for m in metric_lines(run_dir) if "loss" in m] == [1, 2, 3, 4]
    assert (run_dir / "config.yaml").read_text() == stored
    # a config.yaml shortened by hand: the run cannot go back to fewer steps
    (run_dir / "config.yaml").write_text(stored.replace("max_steps: 4", "max_steps: 2"))
    assert main(resume) == 2
    assert "checkpoint-4 is at step 4, past max_steps 2; a run cannot be shortened" in capsys.readouterr().err


def test_a_cut_last_metrics_line_is_dropped_and_any_other_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": step, "loss": step / 10}) for step in (1, 2, 3)]
    for tail in ['{"step": 4, "lo', "  ", ""]:
        path.write_text("\n".join(lines) + "\n" + tail)
        drop_metrics_after(path, 2)
        assert path.read_text() == "\n".join(lines[:2]) + "\n"
    path.write_text("\n".join([lines[0], '{"step": 2, "lo', lines[2]]) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl line 2 is not valid JSON"):
        drop_metrics_after(path, 3)


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_a_resume_of_a_tied_model_warns_of_no_missing_key(settings, tiny_model_dir):
    assert AutoModelForCausalLM.from_pretrained(tiny_model_dir).config.tie_word_embeddings
    run_dir = train({**settings, "max_steps": 2})
    (run_dir / "run.json").unlink()  # so that the resume loads checkpoint-2 into the trainer
    caught = Warnings()
    logging.getLogger("transformers").addHandler(caught)  # transformers' loggers do not propagate to the root
    try:
        train({**settings, "max_steps": 2, "resume": True})
    finally:
        logging.getLogger("transformers").removeHandler(caught)
    assert not [m for m in caught.messages if "missing keys" in m], caught.messages


def test_only_tied_weights_leave_the_missing_keys(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert untied_missing_keys(model, ["lm_head.weight"]) == []
    assert untied_missing_keys(model, ["lm_head.weight", "model.norm.weight"]) == ["model.norm.weight"]
    # both names of a tied tensor missing: nothing loaded it, so both are still missing
    both = ["lm_head.weight", "model.embed_tokens.weight"]
    assert untied_missing_keys(model, both) == both


def test_held_out_evaluation_takes_the_runs_reward_errors_and_reward_timeout(settings, monkeypatch):
    seen = []
    evaluate = held_out.evaluate_rows

    def recording(*args, **kwargs):
        seen.append((kwargs["reward_errors"], kwargs["reward_timeout"]))
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(held_out, "evaluate_rows", recording)
    settings = {**settings, "evaluate": True, "eval_max_new_tokens": 4, "max_steps": 2}
    train({**settings, "reward_errors": "skip", "reward_timeout": 30.0})
    assert seen == [("skip", 30.0)] * 2  # before and after; what the judge limits do: test_eval_run.py


@pytest.mark.parametrize("fast", [False, True])
def test_cpu_fast_path_is_a_run_setting_that_picks_the_trainer_and_its_evaluation(settings, fast):
    """`cpu_fast_path` belongs to `lopti train`'s RunConfig, never to the trainer's config: on the CPU it picks
    CpuLoptiGRPOTrainer, whose held-out evaluation generates on the fast path, or LoptiGRPOTrainer, whose does not."""
    run, trainer_kwargs = split_settings({**settings, "cpu_fast_path": fast})
    assert run.cpu_fast_path is fast and "cpu_fast_path" not in trainer_kwargs
    trainer = run_module.build_trainer(get_task(run.task), run, LoptiGRPOConfig(**trainer_kwargs)).trainer
    assert type(trainer) is (CpuLoptiGRPOTrainer if fast else LoptiGRPOTrainer)
    weights, generation = evaluation_generation(trainer)
    assert weights is trainer.accelerator.unwrap_model(trainer.model)  # fp32: no bf16 copy
    assert isinstance(generation, contextlib.nullcontext) is not fast
