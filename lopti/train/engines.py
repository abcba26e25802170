"""Checks of the engines a run uses (the generation engine TRL drives, the sharding accelerate applies), made once
they are built and before the first step, so a setup that cannot train as asked ends in one line instead of a
traceback from inside the engine or a run that silently trains otherwise.

A colocated vLLM engine (`use_vllm=True, vllm_mode="colocate"`) receives the trained weights after every optimizer
step: TRL's `sync_weights` hands each tensor to the vLLM model's `load_weights`, which copies it into the
parameter the layer computes with. vLLM's CPU build can break that contract: after loading, it repacks each linear
layer's weight for its CPU kernels (oneDNN, sgl-kernel, zentorch) where the CPU can run them in the model's dtype,
and keeps only the packed copy. Linear layers are then left with an empty parameter that has no `weight_loader`, so
the first sync fails (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and an embedding
whose matrix also serves as the output head (a tied `lm_head`) computes its logits from a copy no sync reaches.
Where no such kernel can be built (oneDNN's bf16 matmul on an AVX2-only CPU), vLLM falls back to a plain
linear product with the loaded weight, and the sync works. So the check asks each layer what it computes with.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from lopti.errors import UserError


def colocated_vllm_model(llm: Any) -> torch.nn.Module:
    """Return the model a colocated vLLM engine computes with (the module TRL's `sync_weights` loads into)."""
    return llm.llm_engine.model_executor.driver_worker.model_runner.model


def computes_with_a_copy(module: torch.nn.Module) -> bool:
    """Return True when the vLLM layer `module` computes its linear product with a copy of its weight instead of the
    weight it is handed: its CPU kernel (`cpu_linear`), given a zero weight, still returns a nonzero product."""
    weight = getattr(module, "weight", None)
    if not hasattr(module, "cpu_linear") or not isinstance(weight, torch.Tensor):
        return False  # vLLM's GPU layers, and layers without a weight
    if weight.numel() == 0:
        return True  # emptied once its packed copy was made
    if weight.ndim != 2 or weight.is_meta:
        return False  # not a matrix (convolutions, experts' stacks), or a layer the checkpoint does not have
    with torch.no_grad():
        product = module.cpu_linear(torch.ones(1, weight.shape[1], dtype=weight.dtype), torch.zeros_like(weight), None)
    return bool(product.any())


def check_weight_sync(model: torch.nn.Module) -> None:
    """Raise UserError when trained weights loaded into the vLLM `model` would not reach its computation."""
    for name, module in model.named_modules():
        if computes_with_a_copy(module):
            raise UserError(
                f"use_vllm: this vLLM build computes {name} with a copy of its weight packed for its CPU kernels, "
                "which the weight sync after each optimizer step cannot update (vLLM's CPU build keeps only the "
                "packed copy); run vLLM on a GPU, or set use_vllm=False"
            )


def ignored_fsdp_config(trainer: Any) -> str | None:
    """Return why the launch's FSDP config would be ignored, or None. accelerate applies FSDP only on accelerator
    devices (its state keeps a CPU launch MULTI_CPU even with ACCELERATE_USE_FSDP set), so on the CPU every process
    would train a whole copy of the model, as DDP does, without a word: a run that asked for sharding is refused."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true" or trainer.is_fsdp_enabled:
        return None
    return (
        f"this launch's FSDP config has no effect on {trainer.accelerator.device.type.upper()}: accelerate shards a "
        "model only on GPUs and other accelerators, and would train a whole copy per process here (as DDP does); "
        "launch without the FSDP config (accelerate launch --multi_gpu), or on GPUs"
    )


def is_sharded(trainer: Any) -> bool:
    """Return True when `trainer`'s model is sharded across processes (FSDP, DeepSpeed ZeRO-3). Each forward of a
    sharded model gathers its weights, a collective every process must join: a forward that only some processes run
    (one process's evaluation, or a count of forwards that depends on each process's own batch) leaves them waiting."""
    zero_stage = getattr(trainer.accelerator.state.deepspeed_plugin, "zero_stage", 0)
    return trainer.is_fsdp_enabled or zero_stage == 3


def check_engines(trainer: Any) -> None:
    """Raise UserError when the trainer's engines cannot train as its settings ask (see the module)."""
    if trainer.use_vllm and trainer.vllm_mode == "colocate":
        check_weight_sync(colocated_vllm_model(trainer.vllm_generation.llm))
    if problem := ignored_fsdp_config(trainer):
        raise UserError(problem)
