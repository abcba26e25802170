"""Held-out evaluation: decoding (🤗 generate or vLLM) and scoring per group, with pass@k."""
