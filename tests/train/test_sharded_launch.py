"""`lopti train` (AR + Lopti, the default recipe, on the embedded warm start) sharded across two real processes
(gloo, on the CPU): under FSDP2, launched by `accelerate launch --config_file lopti/configs/accelerate/fsdp.yaml`
through tests/train/fsdp_on_cpu.py, which lifts accelerate's accelerator-only gate on FSDP; and under DeepSpeed
ZeRO-3 (lopti/configs/accelerate/deepspeed_zero3.yaml), where deepspeed is installed.

- A sharded run evaluates before and after training and saves its final weights whole, also from FSDP's sharded
  state dicts. Resumed from its checkpoint, it ends with final weights byte-equal to the uninterrupted one's and
  the same training rows: the sharded model, optimizer and both processes' random states are restored.
- On a rollout that does not depend on the process layout (`--fixed_rollout`), two processes × 4 completions
  under FSDP2 train as one process × 8 does, with a loss normalised over the global batch (dapo): the same
  rewards, losses and gradient norms and weights equal to float tolerance (the average of the two halves'
  gradients and the sharded norm round differently from one process's sums). With bnpo, the recipe's loss type,
  each process divides by its own tokens (TRL's definition), so the layouts differ by design.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

# One two-process launch at a time under pytest-xdist: each uses both cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two-process-launch")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("fsdp_on_cpu.py")
SETTINGS = {
    "task": "kk", "evaluate": "false", "num_generations": "4", "max_completion_length": "48", "max_steps": "4",
    "save_steps": "2", "report_to": "none", "disable_tqdm": "true",
}  # fmt: skip


def lopti_train(
    out: Path, processes: int, arguments: list[str], config: str = "fsdp.yaml", *launch: str, port: str = ""
) -> None:
    """Run `lopti train --output_dir out ...` through fsdp_on_cpu.py: with `processes` = 2 under accelerate's
    `config` (FSDP2 by default) and `launch` options, the processes meeting at `port`; as a plain process with 1;
    lopti is imported from this checkout."""
    launcher = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(ROOT / "lopti/configs/accelerate" / config), *launch, "--num_processes", "2", "--num_machines", "1",
        "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend", "no",
    ]  # fmt: skip
    command = [*(launcher if processes == 2 else [sys.executable]), str(SCRIPT), "train", "--output_dir", str(out)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run([*command, *arguments], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def settings(**overrides: str) -> list[str]:
    return [word for key, value in {**SETTINGS, **overrides}.items() for word in (f"--{key}", value)]


def train_rows(out: Path) -> list[dict]:
    """Return the training rows of `out`'s metrics.jsonl, without their timings (`step_time`)."""
    rows = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in row]
    return [{key: value for key, value in row.items() if not key.endswith("time")} for row in rows]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "final" / "model.safetensors")


# The uninterrupted sharded runs also evaluate before and after training (4 held-out prompts)
EVALUATED = {"per_device_train_batch_size": "8", "evaluate": "true", "eval_puzzles": "4"}
# FSDP's sharded checkpoints (torch.distributed.checkpoint folders); the fixed-rollout runs save full state dicts
SHARDED_STATE_DICT = ("--fsdp_state_dict_type", "SHARDED_STATE_DICT")


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory, free_port) -> Path:
    """Return the folder of a two-process FSDP2 run trained start to end (4 steps, checkpoints at 2 and 4, sharded
    state dicts)."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    lopti_train(out, 2, settings(**EVALUATED), "fsdp.yaml", *SHARDED_STATE_DICT, port=free_port())
    assert (out / "eval_after.json").is_file()  # every process evaluates the sharded model, the first one writes
    assert json.loads((out / "run.json").read_text()) == {**json.loads((out / "run.json").read_text()),
                                                          "processes": 2, "sharding": "FSDP2"}  # fmt: skip
    assert sum(row["grad_norm"] > 0 for row in train_rows(out)) >= 3, "the run must learn for equal weights to count"
    return out


def resumes_byte_equal(finished: Path, out: Path, port: str, config: str, *launch: str) -> None:
    """Resume a copy of `finished` as a kill after step 3 leaves it (its settings and first evaluation,
    checkpoint-2, three rows logged) into `out` under `config`; check that it ends with `finished`'s weights and
    training rows."""
    out.mkdir()
    for name in ("config.yaml", "eval_before.json", "eval_before_sampled.json"):
        shutil.copy(finished / name, out)
    shutil.copytree(finished / "checkpoint-2", out / "checkpoint-2")
    rows = (finished / "metrics.jsonl").read_text().splitlines(keepends=True)
    (out / "metrics.jsonl").write_text("".join(rows[:3]))
    lopti_train(out, 2, ["--resume"], config, *launch, port=port)
    assert (out / "final/model.safetensors").read_bytes() == (finished / "final/model.safetensors").read_bytes()
    assert train_rows(out) == train_rows(finished)


def test_a_sharded_run_resumed_from_its_checkpoint_ends_byte_equal(sharded_run, tmp_path, free_port):
    checkpoint = sharded_run / "checkpoint-2"
    assert {"pytorch_model_fsdp_0", "optimizer_0", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    resumes_byte_equal(sharded_run, tmp_path / "run", free_port(), "fsdp.yaml", *SHARDED_STATE_DICT)


def test_zero3_trains_as_fsdp2_does_and_resumes_byte_equal(sharded_run, tmp_path, free_port):
    pytest.importorskip("deepspeed")  # not a lopti dependency: its source build needs torch at build time
    out = tmp_path / "zero3"
    lopti_train(out, 2, settings(**EVALUATED), "deepspeed_zero3.yaml", port=free_port())
    assert (out / "eval_after.json").is_file()
    assert json.loads((out / "run.json").read_text())["sharding"] == "DeepSpeed ZeRO-3"
    for a, b in zip(train_rows(out), train_rows(sharded_run), strict=True):  # the same completions, alike updates
        assert a.get("reward") == b.get("reward")
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["grad_norm"] == pytest.approx(
            b["grad_norm"], rel=1e-5
        )
    resumes_byte_equal(out, tmp_path / "resumed", free_port(), "deepspeed_zero3.yaml")


def test_two_sharded_processes_train_as_one_process_on_the_same_completions(tmp_path, free_port):
    # dapo divides by the tokens of the global batch; the recipe's bnpo by each process's own, which makes the
    # two layouts' losses differ by design (0.4% at step 1 here)
    fixed = ["--fixed_rollout", "--loss_type", "dapo"]
    lopti_train(tmp_path / "fsdp", 2, [*settings(per_device_train_batch_size="4"), *fixed], port=free_port())
    lopti_train(tmp_path / "one", 1, [*settings(per_device_train_batch_size="8"), *fixed])
    sharded, single = train_rows(tmp_path / "fsdp"), train_rows(tmp_path / "one")
    assert [row["step"] for row in sharded] == [row["step"] for row in single] == [1, 2, 3, 4]
    for a, b in zip(sharded, single, strict=True):
        assert a.get("reward") == b.get("reward")  # the same completions, scored alike
        for key in ("loss", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), (a["step"], key)
    assert any(row["grad_norm"] > 0 for row in single)
    ours, theirs = final_weights(tmp_path / "fsdp"), final_weights(tmp_path / "one")
    # FSDP2's full state dict names the tied output head apart from the embedding (one process's save stores the
    # tensor once); the two stay one tensor through training
    assert torch.equal(ours.pop("lm_head.weight"), ours["model.embed_tokens.weight"])
    assert ours.keys() == theirs.keys()
    for name in ours:  # Adam's steps of 1e-4 from gradients that agree to rounding: 1.1e-5 apart at most here
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=5e-5, msg=name)
