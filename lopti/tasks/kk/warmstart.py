"""Warm start: two supervised stages (TRL's SFTTrainer) that teach a model the K&K format and a way to solve.

RL needs a policy that sometimes gets puzzles right and whose greedy answer is not yet its best: pass@k
well above pass@1 is what gives groups a reward spread. Stage 1 teaches the assume-and-check trace of
`lopti.tasks.kk.trace` followed by the answer, on every puzzle: the skill. Stage 2, on other puzzles,
answers most of them at once and reasons first on `trace_share` of them: the habit. A tiny model can
execute the trace but cannot solve a puzzle in one step, so its greedy answer becomes the unreliable
immediate one while its samples keep the reasoning on about `trace_share` of new puzzles; RL with a
verifiable reward has to find and reinforce it. The teacher is always right. Puzzles come only from
training forms (`is_train_form`), so no held-out puzzle is ever seen here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.prompts import trainer_prompt
from lopti.tasks.kk.trace import FORMS, render_trace

STAGES = ("reason", "answer")


@dataclass
class WarmStartConfig:
    """The two SFT stages: data, optimisation and their cost (`bench/warm_start.py` builds the shipped one)."""

    people: str = "3"
    template: str = "terse"
    fixed_names: bool = True
    seed: str = "warm-start"
    trace_form: str = "plain"
    """How the trace is written (`lopti.tasks.kk.trace.FORMS`): "varied" adds free choices an LLM's traces have."""
    puzzles_per_size: int = 30000
    """Stage 1: puzzles whose completion is the trace, then the answer."""
    copies: int = 2
    """Each stage-1 puzzle appears this many times, each with its own trace (start of the search, synonyms)."""
    learning_rate: float = 2e-3
    answer_puzzles: int = 6000
    """Stage 2: other puzzles, answered at once except on `trace_share` of them."""
    trace_share: float = 0.4
    """Share of stage-2 completions that still reason first; greedy decoding then takes the immediate answer."""
    answer_learning_rate: float = 1e-3
    batch_size: int = 32
    warmup_ratio: float = 0.02
    bf16: bool = True
    """Train under bf16 autocast where the CPU has bf16 instructions (faster there; the weights stay fp32)."""


def completion(record: dict, trace: bool, rng: random.Random, form: str = "plain") -> str:
    """Return the SFT completion after the prompt's "<think>": the trace (or nothing) in `form`
    (`lopti.tasks.kk.trace.FORMS`), then the answer."""
    worked = f"\n{render_trace(record['statements'], record['solution'], rng, form)}\n" if trace else ""
    return f"{worked}</think>\n<answer>\n{record['solution_text']}\n</answer>"


def stage_records(config: WarmStartConfig, stage: str) -> list[dict]:
    """Return the puzzles of one stage ("reason": stage 1, "answer": stage 2), each once."""
    if stage not in STAGES:
        raise ValueError(f"warm start stage must be one of {', '.join(STAGES)}, got {stage!r}")
    count, seed = (
        (config.puzzles_per_size, config.seed)
        if stage == "reason"
        else (config.answer_puzzles, f"{config.seed}|answer")
    )
    records = kk_records(
        config.people, train=count, test=0, seed=seed, template=config.template, fixed_names=config.fixed_names
    )
    return records["train"]


def sft_dataset(config: WarmStartConfig, stage: str = "reason"):
    """Return one stage's prompt/completion 🤗 dataset: the prompt ends in "<think>"; the completion reasons or
    not, then answers."""
    from datasets import Dataset

    if not 0.0 <= config.trace_share <= 1.0:
        raise ValueError(f"warm start trace_share must be in [0, 1], got {config.trace_share}")
    if config.trace_form not in FORMS:
        raise ValueError(f"warm start trace_form must be one of {', '.join(FORMS)}, got {config.trace_form!r}")
    if config.copies < 1:
        raise ValueError(f"warm start copies must be a whole number ≥ 1, got {config.copies}")
    rng = random.Random(f"{config.seed}|{stage}")
    records = stage_records(config, stage)
    copies = config.copies if stage == "reason" else 1
    return Dataset.from_list(
        [
            {
                "prompt": trainer_prompt(r["prompt"], config.template),
                "completion": completion(
                    r, stage == "reason" or rng.random() < config.trace_share, rng, config.trace_form
                ),
            }
            for _ in range(copies)
            for r in records
        ]
    ).shuffle(seed=0)


def cpu_has_bf16() -> bool:
    """Return True when this CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX); elsewhere autocast is slower."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def sft_arguments(config: WarmStartConfig, stage: str, learning_rate: float, output_dir: Path):
    """Return one stage's `SFTConfig`: one epoch, cosine schedule, loss on the completion only.

    Stage 1 batches completions of similar length (they run from 20 to 260 tokens: less padding). Stage 2 is
    drawn in random order: length-grouped batches hold only traces or only immediate answers, and each
    length-sorted run of batches ends on immediate answers, which drives the first token's choice of a trace
    far below `trace_share` on new puzzles.
    """
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=1.0,
        learning_rate=learning_rate,
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
        train_sampling_strategy="group_by_length" if stage == "reason" else "random",
        pad_to_multiple_of=32,  # few distinct shapes, so oneDNN's kernel cache stays small under autocast
        disable_tqdm=False,
    )


def warm_start(
    base: str | Path, out: str | Path, config: WarmStartConfig | None = None, stage_one: str | Path | None = None
) -> Path:
    """Fine-tune the model at `base` in the two stages and save it (with its tokenizer) to `out`.

    With `stage_one`, the model after stage 1 (most of the cost) is kept there, or, when that folder already
    holds it, taken from there and only stage 2 is trained: stage 2 can be tuned at a tenth of the cost.
    """
    config = config or WarmStartConfig()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from lopti.console import SFT_COLUMNS, use_lopti_console

    reuse = stage_one is not None and (Path(stage_one) / "config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(stage_one if reuse else base)
    for stage, learning_rate in zip(STAGES, (config.learning_rate, config.answer_learning_rate), strict=True):
        if stage == "reason" and reuse:
            continue
        trainer = SFTTrainer(
            model=model,
            args=sft_arguments(config, stage, learning_rate, Path(out) / "sft-work"),
            train_dataset=sft_dataset(config, stage),
            processing_class=tokenizer,
        )
        use_lopti_console(trainer, f"warm start (SFT, {stage})", SFT_COLUMNS)
        trainer.train()
        model = trainer.model
        if stage == "reason" and stage_one is not None:
            trainer.save_model(str(stage_one))
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # the SFT's bf16 must not carry over to the RL trainer
    return Path(out)
