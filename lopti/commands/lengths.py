"""The size checks of `lopti train` and `lopti eval` before the model is built: the longest prompt plus an answer
budget must fit in what the model can attend to (from its config.json), and a training set must fill one generated
batch.

Past that length a model's position embeddings run out, so generation fails deep inside torch (or, with the CPU
fast path's cache sized for the whole budget, asks for terabytes first); one line naming the setting and the
largest value that fits is what the user can act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lopti.errors import UserError
from lopti.evaluation.generation import prompt_text

if TYPE_CHECKING:
    from lopti.train.config import LoptiGRPOConfig


def position_limit(name_or_path: str) -> int | None:
    """Return the positions the model at `name_or_path` attends to (its config's `max_position_embeddings`), or
    None where its config names no such limit or cannot be read (loading the model then names the problem)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError):
        return None
    limit = getattr(config.get_text_config(), "max_position_embeddings", None)
    return limit if isinstance(limit, int) and limit > 0 else None


def longest_prompt(prompts: Iterable[Any], tokenizer) -> int:
    """Return the token count of the longest prompt as the model is fed it (chat messages through the template)."""
    texts = [prompt_text(prompt, tokenizer) for prompt in prompts]
    if not texts:
        return 0
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


def check_lengths(model: str, model_path: str, tokenizer, prompts: Iterable[Any], budgets: Mapping[str, int]) -> None:
    """Raise a UserError naming the first setting in `budgets` (setting name → answer tokens) whose answers would
    not fit after the longest of `prompts` in the positions the model attends to."""
    limit = position_limit(model_path)
    if limit is None:
        return
    prompt = longest_prompt(prompts, tokenizer)
    for key, budget in budgets.items():
        if prompt + budget > limit:
            fits = f"set {key} to at most {limit - prompt}" if limit > prompt else "use shorter prompts"
            raise UserError(
                f"{key} {budget}: the longest prompt ({prompt} tokens) plus {budget} answer tokens is more than the "
                f"{limit} positions model {model} attends to (max_position_embeddings); {fits}"
            )


def check_one_batch(prompts: int, args: LoptiGRPOConfig) -> None:
    """Refuse a training set smaller than one generated batch's prompts: TRL's sampler would make no batch of it,
    and the run would end at step 0 having trained nothing."""
    needed = args.generation_batch_size // args.num_generations
    if prompts < needed:
        raise UserError(
            f"the training set has {prompts} prompt(s) and one generated batch takes {needed} "
            f"(generation_batch_size {args.generation_batch_size} / num_generations {args.num_generations}): "
            "generate more (train_puzzles) or make the batch smaller (per_device_train_batch_size)"
        )
