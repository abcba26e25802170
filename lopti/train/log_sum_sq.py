"""log Σ p² of each completion token, which TRL's fused LM head can compute but TRL's log-prob pass drops.

The gradient of −log π(token) with respect to the logits has norm √(1 − 2π + Σ p²) (lopti.core.bound), so
log Σ p² taken from the same forward gives each token's exact gradient share at no extra cost: the kernel
accumulates it in the pass over the vocabulary that gives log π.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl.trainer.utils import add_fused_lm_head


class LogSumSqCapture:
    """Makes the policy's fused LM head also return log Σ p², and keeps it for the tokens of one log-prob pass.

    TRL patches the model's forward to return log-probs and entropy; patching it again adds log Σ p². TRL's
    `_get_per_token_logps_and_entropies` passes on only log-probs and entropy, so a thin wrapper around the forward
    collects log Σ p² while a pass runs inside `collecting()`. A model the wrapper is not on (the reference model)
    leaves the pass without it.
    """

    def __init__(self, model: torch.nn.Module, temperature: float, cast_lm_head_to_fp32: bool) -> None:
        model = model.get_base_model() if is_peft_model(model) else model
        add_fused_lm_head(
            model,
            temperature=temperature,
            cast_lm_head_to_fp32=cast_lm_head_to_fp32,
            outputs=("log_probs", "entropy", "log_sum_sq_probs"),
        )
        fused_forward = model.forward
        self._parts: list[torch.Tensor | None] | None = None  # a list while a pass runs

        @functools.wraps(fused_forward)
        def forward(*args: Any, **kwargs: Any) -> Any:
            outputs = fused_forward(*args, **kwargs)
            if kwargs.get("fused_lm_head") and self._parts is not None:
                self._parts.append(outputs.log_sum_sq_probs)
            return outputs

        model.forward = forward

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[torch.Tensor | None]]:
        """Collect log Σ p² from the forwards run inside the block; yields the list `result` reads."""
        self._parts = parts = []
        try:
            yield parts
        finally:
            self._parts = None

    @staticmethod
    def result(parts: list[torch.Tensor | None], rows: int, logits_to_keep: int) -> torch.Tensor | None:
        """Return the (rows, logits_to_keep) log Σ p² of a pass, or None where a forward did not give it."""
        if not parts or any(part is None for part in parts) or sum(len(part) for part in parts) != rows:
            return None
        return torch.cat([part[:, -logits_to_keep:] for part in parts])
