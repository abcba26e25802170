"""Warm start: a short supervised stage (TRL's SFTTrainer) that teaches a model the K&K answer format.

RL needs a policy that sometimes gets puzzles right: pass@k well above pass@1 is what gives groups a
reward spread. The SFT targets give the answer directly after an empty think block; puzzles come only
from training forms (`is_train_form`), so no held-out test puzzle is ever seen here.

The default teacher is imperfect on purpose: it solves 70% of the puzzles and, on the rest, guesses that
everyone is a knight. Trained on the solutions alone, the tiny model's greedy answer is already its best
one and RL has nothing to find (configs/kk-tiny-cpu.yaml has the measurements); with the guesses, its
greedy answer is the guess while its samples still hold the solver, as a pretrained LLM's samples hold
answers its greedy decoding misses. RL with a verifiable reward has to find and reinforce them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.prompts import trainer_prompt
from lopti.tasks.kk.render import render_solution


@dataclass
class WarmStartConfig:
    """The SFT stage: data, optimisation and its cost."""

    # 0.62x the SFT examples of 4500/2e-3/32: on docs/performance.md's validation set greedy 10.2 vs 10.4%,
    # pass@1 9.6 vs 8.8%, pass@8 46.9 vs 44.8%, format errors 0.4 vs 0.5% (its pre-registered grid, point F).
    people: str = "3-4"
    puzzles_per_size: int = 2800
    template: str = "terse"
    fixed_names: bool = True
    seed: str = "warm-start"
    epochs: float = 1.0
    learning_rate: float = 3e-3
    batch_size: int = 16
    warmup_ratio: float = 0.05
    guess_share: float = 0.3
    """Share of examples labelled with the credulous guess "everyone is a knight" instead of the solution:
    an imperfect teacher, so the warm start's samples hold answers its greedy decoding does not give."""


def teacher_label(record: dict, guess: bool) -> str:
    """Return the SFT answer lines: the solution, or with `guess` everyone a knight."""
    if not guess:
        return record["solution_text"]
    return render_solution(record["names"], [True] * record["people"], tuple(record["roles"]))


def sft_dataset(config: WarmStartConfig):
    """Return a prompt/completion 🤗 dataset: the prompt ends in "<think>", the completion closes it and answers."""
    from datasets import Dataset

    if not 0.0 <= config.guess_share < 1.0:
        raise ValueError(f"guess_share must be in [0, 1), got {config.guess_share}")
    guesses = random.Random(f"{config.seed}|guess")
    records = kk_records(
        config.people,
        train=config.puzzles_per_size,
        test=0,
        seed=config.seed,
        template=config.template,
        fixed_names=config.fixed_names,
    )["train"]
    return Dataset.from_list(
        [
            {
                "prompt": trainer_prompt(r["prompt"], config.template),
                "completion": f"</think>\n<answer>\n{label}\n</answer>",
            }
            for r in records
            for label in [teacher_label(r, guesses.random() < config.guess_share)]
        ]
    ).shuffle(seed=0)


def warm_start(base: str | Path, out: str | Path, config: WarmStartConfig | None = None) -> Path:
    """Fine-tune the model at `base` on K&K answers and save it (with its tokenizer) to `out`."""
    config = config or WarmStartConfig()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from lopti.console import SFT_COLUMNS, use_lopti_console

    tokenizer = AutoTokenizer.from_pretrained(base)
    args = SFTConfig(
        output_dir=str(Path(out) / "sft-work"),
        num_train_epochs=config.epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        warmup_steps=config.warmup_ratio,
        lr_scheduler_type="cosine",
        weight_decay=0.01,
        logging_steps=25,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
        completion_only_loss=True,
        disable_tqdm=False,
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        args=args,
        train_dataset=sft_dataset(config),
        processing_class=tokenizer,
    )
    use_lopti_console(trainer, "warm start (SFT)", SFT_COLUMNS)
    trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    return Path(out)
