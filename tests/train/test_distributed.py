"""`accelerate launch --multi_gpu --num_processes 2` with use_cpu: two real processes (gloo) on the CPU.

accelerate's `--cpu` flag runs single-process unless MPI is set up, so the torchrun-based launcher is used.
"""

import json
import os
import subprocess
import sys

import pytest

# One two-process launch at a time under pytest-xdist: each uses both cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two-process-launch")]


def test_two_process_cpu_launch(tiny_model_dir, tmp_path, free_port):
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--main_process_port", free_port(), "--mixed_precision", "no", "--dynamo_backend",
        "no", "-m", "lopti.cli", "train",
        "--task", "kk", "--model", str(tiny_model_dir), "--people", "3", "--train_puzzles", "32", "--eval_puzzles", "4",
        "--template", "compact", "--per_device_train_batch_size", "4", "--num_generations", "4",
        "--max_completion_length", "12", "--max_steps", "4", "--save_steps", "2", "--report_to", "none",
        "--disable_tqdm", "true", "--output_dir", str(run_dir),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary == {**summary, "processes": 2, "global_step": 4}
    assert (run_dir / "final" / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[:4] == [1, 2, 3, 4]
