"""TRL's colocated vLLM generation (`use_vllm=True, vllm_mode="colocate"`) with vLLM's CPU build, each run in a
process of its own (colocate_run.py). Whether a weight sync reaches vLLM's CPU kernels depends on the CPU: where
vLLM repacks the weights for oneDNN (AVX-512 BF16, AMX), GRPOTrainer meets a traceback at its first sync; where it
cannot (AVX2), vLLM computes with the loaded weights and the sync works. LoptiGRPOTrainer refuses the first case in
one line before training and trains in the second. With the kernels made to compute from the loaded weights, the
whole path trains on any CPU, vLLM samples with the trained weights and TRL's importance-sampling correction
reaches lopti's loss."""

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


def sampled_with_the_trained_weights(report: dict) -> bool:
    """Return True when a run trained and vLLM sampled with the trainer's current weights at both generations (in
    vLLM's dtype, bf16 on the CPU), its log-probabilities within 0.01 of the trainer's."""
    if "error" in report:
        return False
    sampled = [
        row["sampling/sampling_logp_difference/mean"]
        for row in report["log"]
        if "sampling/sampling_logp_difference/mean" in row
    ]
    return report["weight_gaps"] == [0.0, 0.0] and len(sampled) == 2 and max(sampled) < 1e-2


def test_lopti_refuses_a_colocated_vllm_exactly_where_grpotrainers_weight_sync_cannot_reach_it(model_dir, tmp_path):
    plain = colocate(model_dir, tmp_path / "trl", "trl")
    ours = colocate(model_dir, tmp_path / "lopti", "lopti")
    print(f"GRPOTrainer on this CPU: {plain.get('error', 'trained, sampling with the synced weights')}")
    if "error" in plain:  # vLLM repacked the weights: the sync cannot load into them
        assert plain["error"] == "AttributeError: 'Parameter' object has no attribute 'weight_loader'"
        assert "sync_weights" in plain["frames"]  # TRL's weight sync, into vLLM's load_weights
        assert ours["error"].startswith("UserError: use_vllm: this vLLM build computes model.")
        assert "cannot update" in ours["error"] and ours["generate_calls"] == 0
    else:  # vLLM computes with the loaded weights: both train, sampling with the weights each step left
        assert sampled_with_the_trained_weights(plain), plain["log"]
        assert sampled_with_the_trained_weights(ours), ours.get("traceback", ours.get("log"))
        assert ours["generate_calls"] == 2 and ours["ratio_reached_loss"]


def test_colocated_vllm_samples_with_the_trained_weights_and_its_ratio_reaches_the_loss(model_dir, tmp_path):
    report = colocate(model_dir, tmp_path / "run", "lopti", keep_weights=True)
    assert sampled_with_the_trained_weights(report), report.get("traceback", report.get("log"))
    steps = [row for row in report["log"] if "loss" in row]
    assert len(steps) == 4 and report["generate_calls"] == 2  # 4 optimizer steps, 2 per generated batch (Lopti)
    assert sum(row["grad_norm"] > 0 for row in steps) >= 2  # the weights moved between the two generations
    sampled = [row for row in steps if "sampling/importance_sampling_ratio/mean" in row]
    assert all(0.9 < row["sampling/importance_sampling_ratio/mean"] < 1.1 for row in sampled)
    assert report["ratio_reached_loss"]
