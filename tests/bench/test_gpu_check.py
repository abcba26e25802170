"""bench/gpu_check.py: its dry run (the GPU check's code on the CPU, float32, tiny), and which carried wheels it
installs (only those whose package is missing)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_wheels_of_missing_packages_are_installed(tmp_path):
    for name in ("trl-1.16.0-py3-none-any.whl", "no_such_package_here-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    assert [wheel.name for wheel in load_gpu_check().missing_wheels(tmp_path)] == [
        "no_such_package_here-1.0-py3-none-any.whl"
    ]


@pytest.mark.slow
def test_the_dry_run_trains_every_variant_and_prints_both_ratios(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), "--dry_run", "--batches", "2", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "AR + Lopti / GRPO: " in result.stdout and "lopti GRPO / GRPOTrainer: " in result.stdout
    figures = json.loads(out.read_text())
    assert figures["device"] == "CPU"
    assert [run["batches_timed"] for run in figures["runs"].values()] == [2, 2, 2]  # 1 per round, 2 rounds
    assert all(len(run["rounds"]) == 2 for run in figures["runs"].values())
    assert figures["ar_lopti_over_grpo"] > 0 and figures["lopti_grpo_over_trl"] > 0
