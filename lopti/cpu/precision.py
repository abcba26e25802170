"""Which precision the CPU multiplies fast, and a low-precision copy of a model's weights for generation.

On a CPU with native bfloat16 instructions (AVX-512 BF16 or AMX) a bf16 matrix product runs several times faster
than an fp32 one; elsewhere bf16 is emulated and slower. `lopti train` therefore picks TRL's `bf16` by the CPU
(`native_bf16`) unless it is given. With `bf16`, TRL runs the update under autocast; generation (the rollout and
the held-out evaluation) runs on a bf16 copy of the weights (`LowPrecisionCopy`), as a GPU trainer samples from a
bf16 engine: autocast would cast every fp32 weight again at each decoded token, which costs what it saves.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from transformers.initialization import no_init_weights


def native_bf16() -> bool:
    """Return True when this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX tiles)."""
    return cpu_kind() in ("amx", "avx512_bf16")


def cpu_kind() -> str:
    """Return the CPU's fastest matrix instructions as torch detects them: "amx", "avx512_bf16", "avx512", "avx2"
    or "other". CPUs of one model name differ here (cloud machines report "Intel Xeon Processor" with and without
    AMX), and the kind decides bf16's speed and its kernels' arithmetic."""
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return "amx"
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "avx512_bf16"
    capability = torch.backends.cpu.get_cpu_capability().lower()
    return capability if capability in ("avx512", "avx2") else "other"


def hardware() -> dict[str, Any]:
    """Return what a run's speed and arithmetic depend on: the CPU model, kind (`cpu_kind`) and core count, whether
    it multiplies bf16 natively, the GPU if one is visible, and torch's version. run.json records it, so that the
    runs of a study trained over several sittings say where each one ran."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cpu_kind": cpu_kind(),
        "cores": os.cpu_count(),
        "native_bf16": native_bf16(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
    }


def with_cpu_precision(settings: dict[str, Any]) -> dict[str, Any]:
    """Return `settings` with TRL's `bf16` chosen for a CPU run that leaves it unset: on where the CPU multiplies
    bf16 natively (`native_bf16`), off elsewhere (TRL's own default, on, would emulate bf16 at a loss). A run that
    gives `bf16` or `fp16`, or runs on a GPU, keeps its settings and TRL's default."""
    on_cpu = settings.get("use_cpu") or not torch.cuda.is_available()
    if not on_cpu or "bf16" in settings or settings.get("fp16"):
        return settings
    return {**settings, "bf16": native_bf16()}


def precision_words(bf16: bool, on_cpu: bool) -> str:
    """Return how a run's report names its precision: bf16 or fp32, and on the CPU whether bf16 is native there."""
    if not on_cpu:
        return "bf16 autocast" if bf16 else "fp32"
    if bf16:
        native = "native on this CPU" if native_bf16() else "emulated: this CPU has no native bf16"
        return f"bf16 (rollout and evaluation on bf16 weights, the update under bf16 autocast; {native})"
    return "fp32" + (" (this CPU multiplies bf16 natively: `--bf16 true` runs faster)" if native_bf16() else "")


class LowPrecisionCopy:
    """A copy of a causal LM in `dtype`, brought up to date with the model's current weights at each `of` call."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16) -> None:
        self.dtype = dtype
        self.copy: torch.nn.Module | None = None

    def of(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the copy holding `model`'s current weights cast to `dtype` (built on the first call)."""
        if self.copy is None:
            with no_init_weights():  # every weight is loaded below: drawing random ones first takes seconds
                self.copy = AutoModelForCausalLM.from_config(model.config, dtype=self.dtype).eval()
            self.copy.tie_weights()  # which initialising the weights would have done (a tied head is one tensor)
            self.copy.generation_config = model.generation_config
        with torch.no_grad():
            self.copy.load_state_dict(model.state_dict())
        return self.copy
