"""The TRL integration: `LoptiGRPOConfig` and `LoptiGRPOTrainer`, a drop-in subclass of TRL's GRPOTrainer, and
`CpuLoptiGRPOTrainer`, the same with the CPU fast path."""

from lopti.train.config import LoptiGRPOConfig
from lopti.train.cpu import CpuLoptiGRPOTrainer
from lopti.train.trainer import LoptiGRPOTrainer

__all__ = ["CpuLoptiGRPOTrainer", "LoptiGRPOConfig", "LoptiGRPOTrainer"]
