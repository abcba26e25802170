"""`lopti train` under accelerate's FSDP2 on the CPU, for tests/train/test_sharded_launch.py (run as a script, by
`accelerate launch --config_file lopti/configs/accelerate/fsdp.yaml ... tests/train/fsdp_on_cpu.py train ...`).

accelerate applies an FSDP config only on accelerator devices: on the CPU its state stays MULTI_CPU and the model
is trained unsharded, as with DDP (`accelerate.state.AcceleratorState`, which lopti refuses in one line). This
script lifts that gate alone, so the FSDP2 paths GPU users run (accelerate's `fully_shard` of each decoder layer,
its sharded gradients and state dicts, TRL's and transformers' FSDP branches, lopti's loss on DTensor weights)
run on gloo.

`--fixed_rollout` (taken off the arguments before lopti reads them) replaces the rollout by one that does not
depend on the process layout: each completion is sampled from the starting weights with a seed of its own (its
prompt, its place in the group, the optimizer step). A one-process run and a two-process run with the same global
batch then train on the same completions, so their losses and weights can be compared.
"""

from __future__ import annotations

import functools
import sys
import zlib

import torch
from accelerate import state
from accelerate.utils import DistributedType
from transformers import AutoModelForCausalLM

from lopti.cli import main
from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.train import LoptiGRPOTrainer

accelerator_state_init = state.AcceleratorState.__init__


@functools.wraps(accelerator_state_init)
def fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs) -> None:
    """Initialise accelerate's state, then make a CPU launch with an FSDP plugin an FSDP one."""
    accelerator_state_init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin
        state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP  # each later state copies it


def fixed_rollout(self, prompt_ids: list[list[int]], *args, **kwargs) -> tuple[list[list[int]], None]:
    """Return completions sampled from the starting weights, each with a seed from its prompt, its place in the
    group and the optimizer step, cut after the first end token as TRL cuts them."""
    if "_starting_model" not in self.__dict__:
        path = self.accelerator.unwrap_model(self.model).config._name_or_path
        self._starting_model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert len(prompt_ids) % self.num_generations == 0, "each process must hold whole groups"
    completions = []
    for row, ids in enumerate(prompt_ids):
        seed = zlib.crc32(repr((ids, row % self.num_generations, self.state.global_step)).encode())
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self._starting_model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                generation_config=self.generation_config,
            )[0, len(ids) :].tolist()  # fmt: skip
        ends = [i for i, token in enumerate(out) if token in self.eos_token_ids]
        completions.append(out[: ends[0] + 1] if ends else out)
    return completions, None


if __name__ == "__main__":
    state.AcceleratorState.__init__ = fsdp_on_cpu
    arguments = sys.argv[1:]
    if "--fixed_rollout" in arguments:
        arguments.remove("--fixed_rollout")
        for trainer_class in (LoptiGRPOTrainer, CpuLoptiGRPOTrainer):  # `lopti train` picks one by device
            trainer_class._generate_single_turn = fixed_rollout
    sys.exit(main(arguments))
