"""`lopti compare --jobs`: worker processes give the runs one process gives, and a failing run stops no other.

The runners here are module-level functions: the spawned workers import them from this module, so its
top-level imports stay light (lopti.experiments.study imports TRL, seconds per worker).
"""

import json
from pathlib import Path

import pytest
import yaml

from lopti.cli import main


def hash_reward(completions, completion_ids, **kwargs):
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


def train_with_hash_reward(settings):
    """Train for real with a reward that varies on the tiny model's text (its K&K rewards would all be 0)."""
    from lopti.commands import train_run as run_module
    from lopti.experiments import study

    task_rewards = run_module.task_rewards
    run_module.task_rewards = lambda task, run, weights, tokenizer=None: ([hash_reward], [1.0])
    try:
        study.train_settings(settings)
    finally:
        run_module.task_rewards = task_rewards


def fail_on_seed_one(settings):
    """Write a finished run's outputs, except for seed 1, which fails."""
    if settings["seed"] == 1:
        raise ValueError("boom\nsecond line")
    run_dir = Path(settings["output_dir"])
    evaluation = {"group": "people", "per_group": {"3": {"accuracy": 0.5}}, "overall": {"accuracy": 0.5}}
    for name in ("run.json", "eval_before.json", "eval_after.json"):
        (run_dir / name).write_text(json.dumps(evaluation))
    (run_dir / "report.md").write_text("report")


@pytest.mark.slow  # about 25 s on 2 busy cores: each worker imports TRL
def test_two_workers_train_what_one_process_trains(tiny_model_dir, tmp_path):
    from lopti.experiments import compare

    settings = dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="2-3", train_puzzles=8, eval_puzzles=2,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=8, max_steps=2,
        save_strategy="steps", save_steps=1, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e-2, disable_tqdm=True, eval_max_new_tokens=4,
    )  # fmt: skip
    recipe = tmp_path / "base.yaml"
    recipe.write_text(yaml.safe_dump(settings))
    folders = {}
    for jobs in (1, 2):
        folders[jobs] = tmp_path / f"jobs{jobs}"
        compare.run_all(recipe, {}, ["grpo"], [0, 1], folders[jobs], jobs, threads=1, runner=train_with_hash_reward)
    for run in ("grpo-s0", "grpo-s1"):
        one, two = folders[1] / "runs" / run, folders[2] / "runs" / run
        assert (one / "final" / "model.safetensors").read_bytes() == (two / "final" / "model.safetensors").read_bytes()
        losses = [[line.get("loss") for line in metrics(folder)] for folder in (one, two)]
        assert losses[0] == losses[1] and any(loss for loss in losses[0])
        assert (two / "train.log").stat().st_size > 0  # a worker's output goes to its run folder
    assert json.loads((folders[2] / "threads.json").read_text()) == {"grpo-s0": 1, "grpo-s1": 1}
    seeds = (folders[1] / "runs" / "grpo-s0" / "final" / "model.safetensors").read_bytes()
    assert seeds != (folders[1] / "runs" / "grpo-s1" / "final" / "model.safetensors").read_bytes()


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_failing_worker_lets_the_others_finish(tmp_path, monkeypatch, capsys):
    from lopti.experiments import compare

    monkeypatch.setattr(compare, "train_settings", fail_on_seed_one)
    out = tmp_path / "study"
    argv = ["compare", "--variants", "grpo", "--seeds", "0,1,2", "--jobs", "2", "--threads", "1", "--out", str(out)]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert "1 of 3 runs failed: grpo-s1 (ValueError: boom second line); the others finished" in error
    assert len(error.strip().splitlines()) == 1
    finished = sorted(p.parent.name for p in (out / "runs").glob("*/eval_after.json"))
    assert finished == ["grpo-s0", "grpo-s2"]
    assert "ValueError: boom" in (out / "runs" / "grpo-s1" / "train.log").read_text()  # the traceback is kept
