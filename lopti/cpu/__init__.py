"""The CPU engine: lopti's trainer with each prompt once per group in the rollout and the log-prob forwards (the fast
path), and the precision a CPU run trains in.

`lopti.train` is the paper on TRL's own code paths, the same on every device, and imports nothing from here; the
engine builds on it (`CpuFastPath` mixed into `LoptiGRPOTrainer`), and a GPU run trains without any of it. The rest
of lopti enters it here only, through these names:
- `trainer_class`: the trainer for a run's device and `lopti train`'s `cpu_fast_path` setting;
- `evaluation_generation`: the weights and the generation lopti's held-out evaluation runs on (the rollout's);
- `model_decoding`: the same decoding for a model evaluated outside a trainer (`lopti eval`);
- `CpuLoptiGRPOTrainer`: the trainer itself, for code that builds it directly;
- `with_cpu_precision`, `native_bf16`, `precision_words`, `hardware`: the bf16 choice of a CPU run, its wording in
  a report, and the machine a run.json records.
Inside: trainer.py (the class), fast_path.py (its TRL overrides), packing.py (the packed forward and the shared
prefill), decode.py and draws.py (the sampling loop), precision.py (the CPU's matrix instructions and the bf16 copy
that generation runs on).
"""

from __future__ import annotations

import contextlib

import torch

from lopti.extras import require

require("trl", "lopti.cpu")  # before TRL and accelerate are imported: a missing one is one line, not a traceback

from lopti.cpu.fast_path import CpuFastPath  # noqa: E402
from lopti.cpu.packing import fast_generation, packing_applies  # noqa: E402
from lopti.cpu.precision import (  # noqa: E402
    LowPrecisionCopy,
    hardware,
    native_bf16,
    precision_words,
    with_cpu_precision,
)
from lopti.cpu.trainer import CpuLoptiGRPOTrainer  # noqa: E402
from lopti.train.engines import is_sharded  # noqa: E402
from lopti.train.trainer import LoptiGRPOTrainer  # noqa: E402

__all__ = [
    "CpuLoptiGRPOTrainer",
    "evaluation_generation",
    "hardware",
    "model_decoding",
    "native_bf16",
    "precision_words",
    "trainer_class",
    "with_cpu_precision",
]


def trainer_class(device: torch.device, fast_path: bool = True) -> type[LoptiGRPOTrainer]:
    """Return the trainer for a run on `device`: `CpuLoptiGRPOTrainer` on the CPU when `fast_path` (`lopti train`'s
    `cpu_fast_path`), else `LoptiGRPOTrainer`. Elsewhere the fast path would leave every call to TRL anyway; this
    way a GPU run holds none of it."""
    return CpuLoptiGRPOTrainer if fast_path and device.type == "cpu" else LoptiGRPOTrainer


def evaluation_generation(trainer: LoptiGRPOTrainer) -> tuple[torch.nn.Module, contextlib.AbstractContextManager]:
    """Return (the weights to generate with, the block to generate in) for a held-out evaluation of `trainer`'s model.

    Where the CPU trainer's fast path applies: the rollout's weights (`generation_weights`: a bf16 copy under `bf16`)
    and `fast_generation` on them, sampling from the model's distribution by inverse CDF rather than with generate's
    random numbers, as the rollout does unless `CpuFastPath.draws_like_generate` (lopti/cpu/fast_path.py says what
    generate's numbers cost). Anywhere else, a sharded model included (`is_sharded`): the model itself and no block,
    so generation is transformers' own.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    fast = (
        isinstance(trainer, CpuFastPath)
        and packing_applies(model, trainer.accelerator.device)
        and not is_sharded(trainer)
    )
    if not fast:
        return model, contextlib.nullcontext()
    weights = trainer.generation_weights(model)
    return weights, fast_generation(model, weights, same_draws=False)


def model_decoding(model: torch.nn.Module, bf16: bool) -> contextlib.AbstractContextManager:
    """Return the block in which `model.generate` decodes as `lopti train`'s held-out evaluation does
    (`evaluation_generation`), for a model loaded outside a trainer: where the fast path applies (`packing_applies`),
    lopti's sampling loop, on a bf16 copy of the weights under `bf16`; anywhere else no block, so generation is
    transformers' own. A trained model then scores under `lopti eval` as its run's report says, in a fraction of
    generate's time on the CPU (bench/eval_decoding.py)."""
    if not packing_applies(model, model.device):
        return contextlib.nullcontext()
    weights = LowPrecisionCopy(torch.bfloat16).of(model) if bf16 else None
    return fast_generation(model, weights, same_draws=False)
