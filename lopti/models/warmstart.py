"""Warm start: a supervised stage (TRL's SFTTrainer) that teaches a model the K&K format and a way to solve.

RL needs a policy that sometimes gets puzzles right and whose greedy answer is not yet its best: pass@k
well above pass@1 is what gives groups a reward spread. The teacher is always right, but it shows its work
on only `trace_share` of the puzzles: there it writes the assume-and-check trace of
`lopti.tasks.kk.trace` before the answer; on the rest it answers at once, as a model that has not learned
to reason first would. A tiny model can execute the trace but cannot solve a puzzle in one step, so its
greedy answer is the unreliable immediate one while its samples hold the reasoning; RL with a verifiable
reward has to find and reinforce it. Puzzles come only from training forms (`is_train_form`), so no
held-out puzzle is ever seen here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.prompts import trainer_prompt
from lopti.tasks.kk.trace import render_trace


@dataclass
class WarmStartConfig:
    """The SFT stage: data, optimisation and its cost (`bench/warm_start.py` builds the shipped one)."""

    people: str = "3"
    puzzles_per_size: int = 50000
    template: str = "terse"
    fixed_names: bool = True
    seed: str = "warm-start"
    epochs: float = 2.5
    learning_rate: float = 2e-3
    batch_size: int = 32
    warmup_ratio: float = 0.02
    trace_share: float = 0.4
    """Share of examples whose completion shows the assume-and-check trace before the answer; the rest
    answer at once. Greedy decoding then starts with the more common immediate answer."""
    bf16: bool = True
    """Train under bf16 autocast where the CPU has bf16 instructions (about 2.4x faster; weights stay fp32)."""


def completion(record: dict, trace: bool, rng: random.Random) -> str:
    """Return the SFT completion after the prompt's "<think>": the trace (or nothing), then the answer."""
    worked = f"\n{render_trace(record['statements'], record['solution'], rng)}\n" if trace else ""
    return f"{worked}</think>\n<answer>\n{record['solution_text']}\n</answer>"


def sft_dataset(config: WarmStartConfig):
    """Return a prompt/completion 🤗 dataset: the prompt ends in "<think>"; the completion reasons or not, then
    answers."""
    from datasets import Dataset

    if not 0.0 <= config.trace_share <= 1.0:
        raise ValueError(f"warm start trace_share must be in [0, 1], got {config.trace_share}")
    rng = random.Random(f"{config.seed}|trace")
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
                "completion": completion(r, rng.random() < config.trace_share, rng),
            }
            for r in records
        ]
    ).shuffle(seed=0)


def cpu_has_bf16() -> bool:
    """Return True when this CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX); elsewhere autocast is slower."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


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
        bf16=config.bf16 and cpu_has_bf16(),
        seed=0,
        completion_only_loss=True,
        train_sampling_strategy="group_by_length",  # completions run from 20 to 260 tokens: less padding
        pad_to_multiple_of=32,  # few distinct shapes, so oneDNN's kernel cache stays small under autocast
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
