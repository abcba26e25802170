"""The TRL integration: `LoptiGRPOConfig` and `LoptiGRPOTrainer`, a drop-in subclass of TRL's GRPOTrainer."""

from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

__all__ = ["LoptiGRPOConfig", "LoptiGRPOTrainer"]
