"""Which checkpoint a resume may trust: every file it reads present and loadable, else the one before."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from lopti.run_folder import checkpoint_problem, last_complete_checkpoint


def write_checkpoint(folder, step, weights=("model.safetensors",), random_states=("rng_state.pth",)):
    """Write a checkpoint folder laid out as the 🤗 Trainer writes one (small tensors stand in for the states)."""
    folder.mkdir(parents=True)
    for name in weights:
        save_file({"w": torch.full((4, 4), float(step))}, folder / name)
    torch.save({"state": {0: {"exp_avg": torch.ones(4)}}}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    for name in random_states:
        torch.save({"cpu": torch.random.get_rng_state()}, folder / name)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 4}))
    return folder


def cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "optimizer.pt is missing": lambda f: (f / "optimizer.pt").unlink(),
    "scheduler.pt is missing": lambda f: (f / "scheduler.pt").unlink(),
    "rng_state.pth is missing": lambda f: (f / "rng_state.pth").unlink(),
    "model.safetensors is damaged": lambda f: cut(f / "model.safetensors"),
    "optimizer.pt is damaged": lambda f: cut(f / "optimizer.pt"),
    "rng_state.pth is damaged": lambda f: (f / "rng_state.pth").write_bytes(b""),
    "trainer_state.json is missing or damaged": lambda f: cut(f / "trainer_state.json"),
    # a kill during the rotation of old checkpoints, which deletes files one by one
    "no model weights": lambda f: [p.unlink() for p in f.iterdir() if p.name != "trainer_state.json"],
}


@pytest.mark.parametrize("reason", DAMAGES)
def test_a_damaged_checkpoint_is_skipped_with_its_reason(tmp_path, reason):
    write_checkpoint(tmp_path / "checkpoint-2", 2)
    newest = write_checkpoint(tmp_path / "checkpoint-4", 4)
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-4"
    DAMAGES[reason](newest)
    skipped = []
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-2"
    assert last_complete_checkpoint(tmp_path, skipped=lambda folder, why: skipped.append((folder.name, why)))
    assert len(skipped) == 1 and skipped[0][0] == "checkpoint-4" and skipped[0][1].startswith(reason)


def test_lora_sharded_and_multi_process_layouts(tmp_path):
    lora = write_checkpoint(tmp_path / "lora", 2, weights=("adapter_model.safetensors",))
    assert checkpoint_problem(lora) is None
    ddp = write_checkpoint(tmp_path / "ddp", 2, random_states=("rng_state_0.pth", "rng_state_1.pth"))
    assert checkpoint_problem(ddp) is None
    sharded = write_checkpoint(tmp_path / "sharded", 2, weights=("a.safetensors", "b.safetensors"))
    index = {"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert checkpoint_problem(sharded) is None
    (sharded / "b.safetensors").rename(sharded / "b.tmp")
    assert checkpoint_problem(sharded) == "b.safetensors is missing"


def test_deepspeed_layout(tmp_path):
    folder = write_checkpoint(tmp_path / "checkpoint-4", 4, random_states=("rng_state_0.pth",))
    (folder / "optimizer.pt").unlink()  # DeepSpeed keeps the optimizer in its own folder
    (folder / "latest").write_text("global_step4")
    (folder / "global_step4").mkdir()
    torch.save({"module": {}}, folder / "global_step4" / "mp_rank_00_model_states.pt")
    torch.save({"optimizer": {}}, folder / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert checkpoint_problem(folder) is None
    cut(folder / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert checkpoint_problem(folder).startswith("bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt is damaged")
    shutil.rmtree(folder / "global_step4")
    assert checkpoint_problem(folder) == "DeepSpeed folder global_step4 has no optimizer states"
