"""Step time of plain TRL GRPO against lopti's GRPO, + AR and + Lopti, interleaved in one run, as ratios.

Targets (issue 6): + AR ≤ 1.03× plain TRL per step; Lopti's update phase ≤ 2.05× GRPO's update phase per
RL step (Lopti makes two update passes over each generated batch). Also reports update tokens/s and the
achieved FLOP/s of the update (≈ 6 · parameters · tokens) against this machine's measured matmul peak.

The learning rate is tiny (1e-9) so that every variant generates the same completions: generation time,
which dominates a CPU step, is then equal across variants and the ratios measure the update. The first RL
step of each run (warm-up) is dropped; variants run in a rotating order each round.

Run: python bench/step_time.py --models tiny,smollm2-135m --markdown docs/performance.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from lopti.commands.settings import RunConfig
from lopti.models.loading import load_tokenizer, resolve_model
from lopti.tasks.registry import get_task
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

VARIANTS = {
    "trl": (GRPOTrainer, GRPOConfig, {}),
    "lopti-grpo": (LoptiGRPOTrainer, LoptiGRPOConfig, {}),
    "+ar": (LoptiGRPOTrainer, LoptiGRPOConfig, {"ar_alpha": 0.3}),
    "+lopti": (LoptiGRPOTrainer, LoptiGRPOConfig, {"lopti": True, "num_iterations": 2}),
}
SHAPES = {  # model -> (completions per batch, group size, completion tokens, K&K template, fixed names)
    "tiny": (64, 8, 48, "terse", True),
    "smollm2-135m": (8, 4, 64, "compact", False),
}


class StepClock(TrainerCallback):
    """Record each optimizer step's wall time."""

    def __init__(self) -> None:
        self.steps: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(time.perf_counter() - self.started)


def matmul_peak(size: int = 1024, repeats: int = 20) -> float:
    """Return the best measured float32 matmul FLOP/s on this machine (with torch's current threads)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def one_run(
    model_name: str, path: str, variant: str, rl_steps: int, seed: int, variants: dict = VARIANTS
) -> dict[str, float]:
    """Train `rl_steps` RL steps of one of `variants`; return per-RL-step times (warm-up dropped)."""
    completions, group, length, template, fixed = SHAPES[model_name]
    trainer_cls, config_cls, extra = variants[variant]
    run = RunConfig(task="kk", people="3", template=template, fixed_names=fixed, train_puzzles=64, eval_puzzles=1)
    train_rows, _ = get_task("kk").rows(run)
    from datasets import Dataset

    passes = extra.get("num_iterations", 1)
    args = config_cls(
        output_dir=f"/tmp/lopti-bench/{variant}", per_device_train_batch_size=completions, num_generations=group,
        max_completion_length=length, learning_rate=1e-9, max_steps=rl_steps * passes, use_cpu=True, bf16=False,
        report_to=[], logging_steps=1, save_strategy="no", seed=seed, disable_tqdm=True, temperature=1.0,
        beta=0.0, **extra,
    )  # fmt: skip
    clock = StepClock()
    trainer = trainer_cls(
        model=AutoModelForCausalLM.from_pretrained(path),
        reward_funcs=[get_task("kk").make_reward("partial")],
        args=args,
        train_dataset=Dataset.from_list(train_rows),
        processing_class=load_tokenizer(path),
        callbacks=[clock],
    )
    generation: list[float] = []
    tokens: list[int] = []
    generate = trainer._generate_and_score_completions

    def timed(inputs):
        started = time.perf_counter()
        out = generate(inputs)
        generation.append(time.perf_counter() - started)
        tokens.append(int(out["prompt_mask"].sum() + out["completion_mask"].sum()))
        return out

    trainer._generate_and_score_completions = timed
    trainer.train()
    whole = [sum(clock.steps[i : i + passes]) for i in range(0, len(clock.steps), passes)]
    update = [w - g for w, g in zip(whole, generation, strict=True)]
    return {
        "whole": statistics.median(whole[1:]),
        "update": statistics.median(update[1:]),
        "tokens": statistics.median(tokens[1:]),  # prompt + completion tokens of one generated batch
    }


def bench_model(model_name: str, rounds: int, rl_steps: int, peak: float) -> dict:
    path = resolve_model(model_name)
    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
    order = list(VARIANTS)
    per_round = []
    for r in range(rounds):
        results = {}
        for variant in order[r % len(order) :] + order[: r % len(order)]:
            results[variant] = one_run(model_name, path, variant, rl_steps, seed=r)
            print(f"{model_name} round {r} {variant}: {results[variant]}", flush=True)
        per_round.append(results)

    def ratios(numerator: str, denominator: str, part: str) -> list[float]:
        return [round(res[numerator][part] / res[denominator][part], 3) for res in per_round]

    base_update = statistics.median(res["trl"]["update"] for res in per_round)
    tokens = per_round[0]["trl"]["tokens"]
    flops = 6 * params * tokens / base_update
    return {
        "model": model_name,
        "parameters": params,
        "rounds": rounds,
        "median_seconds": {
            v: {p: statistics.median(res[v][p] for res in per_round) for p in ("whole", "update")} for v in VARIANTS
        },
        "ar_vs_trl_whole": ratios("+ar", "trl", "whole"),
        "ar_vs_trl_update": ratios("+ar", "trl", "update"),
        "lopti_vs_grpo_update": ratios("+lopti", "lopti-grpo", "update"),
        "lopti_grpo_vs_trl_whole": ratios("lopti-grpo", "trl", "whole"),
        "update_tokens_per_second": tokens / base_update,
        "update_flops": flops,
        "matmul_peak_flops": peak,
    }


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def markdown(results: list[dict], command: str) -> str:
    lines = [
        "# Performance",
        "",
        f"Produced by `{command}` on this machine ({torch.get_num_threads()} torch threads, CPU). "
        "Ratios are measured side by side in one run (variants interleaved, warm-up step dropped); "
        "min / median / max over rounds.",
        "",
        "| model | params | + AR / TRL (whole step) | + AR / TRL (update) | lopti GRPO / TRL (whole) "
        "| Lopti / GRPO (update per RL step) | update tokens/s | update FLOP/s | of matmul peak |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['parameters'] / 1e6:.1f} M | {spread(r['ar_vs_trl_whole'])} | "
            f"{spread(r['ar_vs_trl_update'])} | {spread(r['lopti_grpo_vs_trl_whole'])} | "
            f"{spread(r['lopti_vs_grpo_update'])} | {r['update_tokens_per_second']:.0f} | "
            f"{r['update_flops'] / 1e9:.1f} G | {100 * r['update_flops'] / r['matmul_peak_flops']:.0f}% |"
        )
    lines += [
        "",
        "Targets: + AR ≤ 1.03× plain TRL; Lopti's update phase ≤ 2.05× GRPO's. The update FLOP/s count "
        "6 · parameters · (prompt + completion tokens) per RL step of plain TRL against the best measured "
        f"1024² float32 matmul ({results[0]['matmul_peak_flops'] / 1e9:.0f} GFLOP/s).",
        "",
        "Median seconds per RL step (whole step / update only):",
        "",
    ]
    for r in results:
        cells = ", ".join(f"{v} {t['whole']:.2f} / {t['update']:.2f}" for v, t in r["median_seconds"].items())
        lines.append(f"- {r['model']}: {cells}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny", help="comma-separated: tiny, smollm2-135m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rl_steps", type=int, default=3, help="RL steps per run; the first is dropped")
    parser.add_argument("--markdown", help="write the results table to this file")
    args = parser.parse_args()
    peak = matmul_peak()
    results = [bench_model(m, args.rounds, args.rl_steps, peak) for m in args.models.split(",")]
    print(json.dumps(results, indent=1))
    if args.markdown:
        command = f"python bench/step_time.py --models {args.models} --rounds {args.rounds} --rl_steps {args.rl_steps}"
        Path(args.markdown).write_text(markdown(results, command + f" --markdown {args.markdown}"))


if __name__ == "__main__":
    main()
