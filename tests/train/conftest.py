"""Fixtures for trainer tests: a peaked variant of the tiny model, and K&K prompts."""

import pytest
import torch

from lopti.tasks.kk.data import kk_dataset


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
