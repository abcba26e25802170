"""Fixtures for trainer tests: a tiny Qwen2 model with a locally trained tokenizer, and K&K prompts."""

import pytest
import torch

from lopti.tasks.kk.data import kk_dataset
from lopti.train.tiny import build_model, build_tokenizer, kk_corpus


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


@pytest.fixture(scope="session")
def kk_prompts():
    """Return a small train split of 2-person K&K prompts in the compact template, as TRL reads them."""
    dataset = kk_dataset(people="2", train=16, test=0, seed=0, template="compact")["train"]
    return dataset.map(lambda row: {"prompt": row["prompt"][0]["content"]})
