"""Test setup: few threads (oversubscribed BLAS threads made tiny CPU runs 30× slower here)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
