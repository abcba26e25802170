"""`CpuLoptiGRPOTrainer`: `LoptiGRPOTrainer` with the CPU fast path, the trainer `lopti train` uses on the CPU.

`LoptiGRPOTrainer` is the paper on TRL's own code paths; `CpuFastPath` (lopti/cpu/fast_path.py) makes TRL's
rollout and log-prob forwards run each prompt once per group on the CPU. This class composes the two, and a user
composes the fast path with their own subclass the same way: `class T(CpuFastPath, MyLoptiGRPOTrainer)`.
"""

from __future__ import annotations

import torch

from lopti.cpu.fast_path import CpuFastPath
from lopti.train.trainer import LoptiGRPOTrainer


class CpuLoptiGRPOTrainer(CpuFastPath, LoptiGRPOTrainer):
    """LoptiGRPOTrainer whose forwards take the CPU fast path where it applies.

    The same training to float rounding (docs/guides/trl.md states the tolerances), in fewer forward tokens on the
    CPU (bench/step_time.py times it against TRL's paths); on any other device, or where the fast path does not
    apply, every call is LoptiGRPOTrainer's own.
    """

    def _rows_without_gradient(self, inputs: dict) -> torch.Tensor | None:
        # lopti's objective is each token's advantage times a function of its ratio, unless a KL or entropy term, a
        # credit step, the MoE loss or TRL's own loss adds more: then a response whose advantages are all zero (its
        # group's rewards tie) gets no gradient
        more_terms = self.beta != 0.0 or self.args.entropy_coef != 0.0 or self.aux_loss_enabled
        if more_terms or self._credit_steps or self._trl_loss:
            return None
        advantages = inputs["advantages"]
        return advantages.eq(0).all(dim=1) if advantages.dim() == 2 else advantages.eq(0)

    def _after_packed_pass(self, logps: torch.Tensor, log_sum_sq: torch.Tensor | None) -> None:
        # the packed pass stands in for TRL's, which LoptiGRPOTrainer observes for its metrics: hand it this one
        self.observe_log_prob_pass(logps, log_sum_sq)
