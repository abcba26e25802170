"""The TRL integration: `LoptiGRPOConfig` and `LoptiGRPOTrainer`, plus the `lopti train` machinery."""

from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

__all__ = ["LoptiGRPOConfig", "LoptiGRPOTrainer"]
