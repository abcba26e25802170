"""The TRL integration: `LoptiGRPOConfig` and `LoptiGRPOTrainer`, a drop-in subclass of TRL's GRPOTrainer that
runs TRL's own code paths on every device (lopti.cpu builds its CPU trainer on this one)."""

from lopti.extras import require

require("trl", "lopti.train")  # before TRL is imported: a missing or unsupported TRL is one line, not a traceback

from lopti.train.config import LoptiGRPOConfig  # noqa: E402
from lopti.train.trainer import LoptiGRPOTrainer  # noqa: E402

__all__ = ["LoptiGRPOConfig", "LoptiGRPOTrainer"]
