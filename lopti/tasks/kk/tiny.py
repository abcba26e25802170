"""Tiny K&K language models built locally: a byte-level BPE tokenizer trained on K&K text and a small
Qwen2-architecture model. Nothing is downloaded, so tests and the embedded default run offline."""

from __future__ import annotations

import random
from pathlib import Path

from lopti.tasks.kk.generate import generate_puzzles
from lopti.tasks.kk.prompts import TEMPLATES, puzzle_prompt
from lopti.tasks.kk.render import pick_names, render_quiz, render_solution
from lopti.tasks.kk.trace import render_trace

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]  # plain added tokens: decoding keeps them
TINY_SHAPE = dict(hidden_size=256, layers=4, heads=4)  # ≈3.4 M parameters: see configs/kk-tiny-cpu.yaml
TRACE_CORPUS_PEOPLE = 4  # traces of larger puzzles are long (2^n tries) and never trained on
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if not (loop.last and message['role'] == 'assistant') %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def kk_corpus(puzzles_per_size: int = 300, people: range = range(2, 9), seed: int = 0) -> list[str]:
    """Return K&K training text for the tokenizer: prompts of every template, quizzes, traces and answers."""
    rng = random.Random(f"tokenizer-corpus|{seed}")
    texts = []
    for size in people:
        count = min(puzzles_per_size, 150) if size == 2 else puzzles_per_size  # only ~184 2-person puzzles exist
        for index, puzzle in enumerate(generate_puzzles(count, size, seed=f"tokenizer|{seed}")):
            names = pick_names(rng, size)
            quiz = render_quiz(puzzle.statements, names, rng)
            template = TEMPLATES[index % len(TEMPLATES)]
            texts.extend(m["content"] for m in puzzle_prompt(puzzle.statements, names, quiz, template))
            texts.append(f"</think>\n<answer>\n{render_solution(names, puzzle.solution)}\n</answer><|im_end|>")
            if size <= TRACE_CORPUS_PEOPLE:  # the warm start's worked solutions (lopti.tasks.kk.trace)
                texts.append(render_trace(puzzle.statements, puzzle.solution, rng))
    return texts


def build_tokenizer(corpus: list[str], vocab_size: int = 768):
    """Return a `PreTrainedTokenizerFast` with a byte-level BPE trained on `corpus` and a ChatML template.

    Byte-level BPE decodes losslessly, so rewards see exactly the text the model wrote.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    wrapped.add_tokens(TAG_TOKENS)
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def build_model(tokenizer, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0):
    """Return a randomly initialised Qwen2ForCausalLM sized for `tokenizer`, deterministic by `seed`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tiny_base(folder: Path) -> None:
    """Write the untrained embedded model `tiny-base` and its tokenizer to `folder` (deterministic)."""
    tokenizer = build_tokenizer(kk_corpus())
    model = build_model(tokenizer, **TINY_SHAPE)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
