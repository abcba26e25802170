"""Sharded launches, the parts that need no second process: FSDP's checkpoint layouts count as complete only when
whole, an FSDP config that accelerate would ignore (on the CPU) is refused before any step, and the divergence
guard reads FSDP2's DTensor weights by their local shards.

The launches themselves (FSDP2 and ZeRO-3 on gloo, resumed, and compared with one process) are
tests/train/test_sharded_launch.py."""

import json
import pickle

import pytest
import torch
import torch.distributed as dist
from datasets import Dataset
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from transformers import AutoModelForCausalLM, AutoTokenizer

from lopti.errors import UserError
from lopti.run_folder import checkpoint_problem
from lopti.train.config import LoptiGRPOConfig
from lopti.train.guards import local_shard
from lopti.train.trainer import LoptiGRPOTrainer


def fsdp_checkpoint(folder, sharded: bool):
    """Write a checkpoint as transformers writes one under FSDP: accelerate's model and optimizer states (one file
    each for a full state dict, distributed-checkpoint folders for a sharded one), without model.safetensors."""
    folder.mkdir()
    if sharded:
        for name in ("pytorch_model_fsdp_0", "optimizer_0"):
            (folder / name).mkdir()
            (folder / name / "__0_0.distcp").write_bytes(b"shard")
            (folder / name / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    else:
        torch.save({"w": torch.ones(2)}, folder / "pytorch_model_fsdp.bin")
        torch.save({"state": {}}, folder / "optimizer.bin")
    torch.save({"last_epoch": 2}, folder / "scheduler.pt")
    for rank in (0, 1):
        torch.save({"cpu": torch.random.get_rng_state()}, folder / f"rng_state_{rank}.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    return folder


@pytest.mark.parametrize("sharded", [False, True])
def test_fsdp_checkpoints_are_complete_only_with_model_and_optimizer_states(tmp_path, sharded):
    folder = fsdp_checkpoint(tmp_path / "checkpoint-2", sharded)
    assert checkpoint_problem(folder) is None
    optimizer = folder / ("optimizer_0/.metadata" if sharded else "optimizer.bin")
    optimizer.write_bytes(b"")
    assert checkpoint_problem(folder) == ("optimizer_0/.metadata is empty" if sharded else "optimizer.bin is damaged"
                                          " (not a whole torch.save file)")  # fmt: skip
    optimizer.unlink()
    assert checkpoint_problem(folder) == f"{'optimizer_0/.metadata' if sharded else 'optimizer.bin'} is missing"


def test_an_fsdp_config_accelerate_ignores_is_refused_before_training(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch` with an FSDP config sets
    args = LoptiGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                           max_completion_length=4, use_cpu=True, bf16=False, report_to=[])  # fmt: skip
    with pytest.raises(UserError, match=r"FSDP config has no effect on CPU: accelerate shards a model only on GPUs"):
        LoptiGRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=[lambda completions, **_: [0.0]],
            args=args, train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}),
            processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        )  # fmt: skip


def test_the_weight_norm_reads_the_local_shard_of_an_fsdp2_weight(tmp_path):
    """FSDP2's weights are DTensors, on which a collective fails; the guard's norm must read each local shard."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        weight = distribute_tensor(torch.arange(6.0).reshape(3, 2), init_device_mesh("cpu", (1,)), [Shard(0)])
        local = local_shard(weight)
        assert isinstance(weight, DTensor) and not isinstance(local, DTensor)
        assert torch.equal(local, torch.arange(6.0).reshape(3, 2))
    finally:
        dist.destroy_process_group()
