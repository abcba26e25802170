"""Fixtures for trainer tests: K&K prompts, and tiny models of other families (MoE, hybrid, gpt-oss, vision)."""

import socket
from collections.abc import Callable

import pytest
import torch

from lopti.tasks.kk.data import kk_dataset


@pytest.fixture(scope="session")
def free_port() -> Callable[[], str]:
    """Return a function that names a TCP port nothing listens on now. Every two-process launch takes its own:
    accelerate's default (29500) may still be held by a killed launch's store while it exits, or by another
    test's process group."""

    def port() -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return str(probe.getsockname()[1])

    return port


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


@pytest.fixture(scope="session")
def tiny_gpt_oss_model_dir(tiny_model_dir, tmp_path_factory):
    """Return a tiny GPT-OSS (4 experts, 2 per token; a sliding-window layer, then full attention, each with its
    attention sinks) with the tiny tokenizer and the router loss coefficient of `tiny_moe_model_dir`, 0.5."""
    from transformers import AutoTokenizer, GptOssConfig, GptOssForCausalLM

    folder = tmp_path_factory.mktemp("tiny-gpt-oss")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = GptOssConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=16, sliding_window=16,
        router_aux_loss_coef=0.5, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )  # fmt: skip
    return save_seeded(GptOssForCausalLM, config, tokenizer, folder)


# A chat template that renders an image part as the LLaVA image token, and text parts as themselves.
IMAGE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_llava(flavour: str, tiny_model_dir, folder, **image_processor_settings):
    """Save a tiny LLaVA of `flavour` ("Llava" or "LlavaNext"): a 1-layer CLIP vision tower on 8×8 images, 4 patches
    each, and a 2-layer Qwen2, with a processor built offline from the tiny tokenizer, an `<image>` token and the
    flavour's image processor (`image_processor_settings` beyond CLIP's sizes go to both it and the model's config);
    return `folder`."""
    import transformers
    from transformers import AutoTokenizer, CLIPVisionConfig, Qwen2Config

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_tokens(["<image>"], special_tokens=True)
    image_processor_class = (
        transformers.CLIPImageProcessor if flavour == "Llava" else transformers.LlavaNextImageProcessor
    )
    processor = getattr(transformers, f"{flavour}Processor")(
        image_processor=image_processor_class(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8},
                                              **image_processor_settings),
        tokenizer=tokenizer, patch_size=4, vision_feature_select_strategy="default", num_additional_image_tokens=1,
        chat_template=IMAGE_CHAT_TEMPLATE,
    )  # fmt: skip
    config = getattr(transformers, f"{flavour}Config")(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=8, patch_size=4),
        text_config=Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                                tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                                pad_token_id=tokenizer.pad_token_id),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1, tie_word_embeddings=True, **image_processor_settings,
    )  # fmt: skip
    save_seeded(getattr(transformers, f"{flavour}ForConditionalGeneration"), config, tokenizer, folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_vision_model_dir(tiny_model_dir, tmp_path_factory):
    """Return a tiny LLaVA with CLIP's image processor (`save_llava`)."""
    return save_llava("Llava", tiny_model_dir, tmp_path_factory.mktemp("tiny-vision"))


@pytest.fixture(scope="session")
def tiny_llava_next_model_dir(tiny_model_dir, tmp_path_factory):
    """Return a tiny LLaVA-NeXT (`save_llava`): each 8×8 image is tiled on the best of its grid pinpoints (8×16,
    two tiles) besides its whole view, the model learns `image_newline`, which ends each row of tile features, and
    reads the `image_sizes` input to unpad them."""
    return save_llava("LlavaNext", tiny_model_dir, tmp_path_factory.mktemp("tiny-llava-next"),
                      image_grid_pinpoints=[[8, 16], [16, 8], [16, 16]])  # fmt: skip


@pytest.fixture(scope="session")
def image_prompts(kk_prompts):
    """Return the K&K prompts as chat messages, each with a random 8×8 image (TRL's `image` column)."""
    import numpy as np
    from datasets import Dataset
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (len(kk_prompts), 8, 8, 3), dtype=np.uint8)
    rows = [{"prompt": [{"role": "user", "content": row["prompt"]}], "image": Image.fromarray(image)}
            for row, image in zip(kk_prompts, pixels, strict=True)]  # fmt: skip
    return Dataset.from_list(rows)
