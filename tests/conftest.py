"""Test setup: few threads (oversubscribed BLAS threads made tiny CPU runs 30× slower here), and a tiny
Qwen2 model with a locally trained tokenizer, and a peaked variant of it, shared by the trainer, command and
diagnostics tests."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

from lopti.tasks.kk.tiny import build_model, build_tokenizer, kk_corpus

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Return a folder holding a saved tiny model and tokenizer (HF format)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tokenizer(kk_corpus(puzzles_per_size=40))
    build_model(tokenizer, hidden_size=32, layers=2, heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def peaked_model_dir(tiny_model_dir, tmp_path_factory):
    """Return the tiny model with its final norm scaled ×12: sampled tokens then fall on both sides of η = 0.5."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("peaked-model")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(12.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder
