"""Rollouts of the tiny model that the probe's tests share."""

import json

import pytest

from lopti.diagnostics.analyze import AnalyzeConfig, analyze


@pytest.fixture
def rollouts_file(tiny_model_dir, tmp_path):
    """Rollouts of the tiny model, with rewards replaced by varied ones (a random model earns none)."""
    config = AnalyzeConfig(
        model=str(tiny_model_dir), task="kk", people="2", template="compact", prompts=3, num_generations=4,
        max_completion_length=6, methods=("grpo",), micro_batch=5,
    )  # fmt: skip
    analyze(config, tmp_path / "first")
    path = tmp_path / "first" / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    rewards = [0.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.2, 0.3, 0.3, 0.3, 0.9]
    edited = [lines[0]] + [json.dumps({**json.loads(x), "reward": r}) for x, r in zip(lines[1:], rewards, strict=True)]
    path.write_text("\n".join(edited) + "\n")
    return config, path
