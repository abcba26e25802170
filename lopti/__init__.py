"""lopti: RL for language models where low-probability tokens do not over-dominate (arXiv 2505.12929)."""

__version__ = "0.1.0"
