"""TRL's colocated vLLM generation (`use_vllm=True, vllm_mode="colocate"`) with vLLM's CPU build, each run in a
process of its own (colocate_run.py): as vLLM ships, a weight sync cannot reach its CPU kernels, which
GRPOTrainer meets as a traceback at its first sync and LoptiGRPOTrainer refuses in one line before training;
with the kernels computing from the loaded weights, the whole path trains, vLLM samples with the trained
weights and TRL's importance-sampling correction reaches lopti's loss."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).with_name("colocate_run.py")


def free_port() -> int:
    """Return a TCP port that no process listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def colocate(model_dir: Path, out: Path, trainer: str, keep_weights: bool = False) -> dict:
    """Return the report of a few colocated-vLLM training steps in a fresh process."""
    command = [sys.executable, str(RUNNER), str(model_dir), str(out), "--trainer", trainer]
    command += ["--keep_weights"] if keep_weights else []
    # a port of its own for the process group of vLLM's engine (29500 unless set), so that tests in parallel can run
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": str(free_port())}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, result.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """Return a saved tiny Qwen2 (hidden 64, 2 layers) with the tiny tokenizer: vLLM loads it from the folder."""
    from lopti.tasks.kk.tiny import build_model, build_tokenizer, kk_corpus

    folder = tmp_path_factory.mktemp("tiny-vllm")
    tokenizer = build_tokenizer(kk_corpus(puzzles_per_size=40))
    build_model(tokenizer, hidden_size=64, layers=2, heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_grpotrainer_fails_at_its_first_weight_sync_into_vllms_cpu_kernels(model_dir, tmp_path):
    report = colocate(model_dir, tmp_path / "run", "trl")
    assert report["error"] == "AttributeError: 'Parameter' object has no attribute 'weight_loader'"
    assert "sync_weights" in report["frames"]  # TRL's weight sync, into vLLM's load_weights


def test_lopti_refuses_vllms_cpu_kernels_in_one_line_before_training(model_dir, tmp_path):
    report = colocate(model_dir, tmp_path / "run", "lopti")
    assert report["error"].startswith("UserError: use_vllm: this vLLM build computes model.")
    assert "cannot update" in report["error"] and report["generate_calls"] == 0


def test_colocated_vllm_samples_with_the_trained_weights_and_its_ratio_reaches_the_loss(model_dir, tmp_path):
    report = colocate(model_dir, tmp_path / "run", "lopti", keep_weights=True)
    assert "error" not in report, report.get("traceback")
    steps = [row for row in report["log"] if "loss" in row]
    assert len(steps) == 4 and report["generate_calls"] == 2  # 4 optimizer steps, 2 per generated batch (Lopti)
    assert sum(row["grad_norm"] > 0 for row in steps) >= 2  # the weights moved between the two generations
    assert report["weight_gaps"] == [0.0, 0.0]  # vLLM sampled with the trainer's current weights (in its dtype)
    sampled = [row for row in steps if "sampling/sampling_logp_difference/mean" in row]
    assert len(sampled) == 2 and all(row["sampling/sampling_logp_difference/mean"] < 1e-2 for row in sampled)
    assert all(0.9 < row["sampling/importance_sampling_ratio/mean"] < 1.1 for row in sampled)
    assert report["ratio_reached_loss"]
