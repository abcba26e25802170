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


def save_seeded(model_class, config, tokenizer, folder):
    """Build `model_class(config)` from seed 0, make it stop and pad with the tokenizer's tokens, save both to
    `folder` and return it."""
    torch.manual_seed(0)
    model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_moe_model_dir(tiny_model_dir, tmp_path_factory):
    """Return a tiny Qwen3-MoE (4 experts, 2 per token) with the tiny tokenizer and a router loss coefficient large
    enough (0.5) that leaving the load-balancing loss out would show in the loss."""
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    folder = tmp_path_factory.mktemp("tiny-moe")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_experts=4,
        num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=1024, tie_word_embeddings=True, router_aux_loss_coef=0.5,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )  # fmt: skip
    return save_seeded(Qwen3MoeForCausalLM, config, tokenizer, folder)


@pytest.fixture(scope="session")
def tiny_hybrid_model_dir(tiny_model_dir, tmp_path_factory):
    """Return a tiny LFM2 (a convolution layer, then full attention): a hybrid model whose cache has a layer
    without keys and values, with the tiny tokenizer."""
    from transformers import AutoTokenizer, Lfm2Config, Lfm2ForCausalLM

    folder = tmp_path_factory.mktemp("tiny-hybrid")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = Lfm2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, layer_types=["conv", "full_attention"], max_position_embeddings=1024,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )  # fmt: skip
    return save_seeded(Lfm2ForCausalLM, config, tokenizer, folder)
