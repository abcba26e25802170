"""Step time of plain TRL GRPO against lopti's GRPO, + AR and + Lopti, interleaved in one run, as ratios.

Targets: + AR ≤ 1.03× plain TRL per step; Lopti's update phase ≤ 2.05× GRPO's update phase per
RL step (Lopti makes two update passes over each generated batch). Also reports update tokens/s and the
achieved FLOP/s of the update (≈ 6 · parameters · tokens) against the measured matmul peak of the machine it
runs on.

The learning rate is tiny (1e-9) so that every variant generates the same completions: generation time,
which dominates a CPU step, is then equal across variants and the ratios measure the update. The first RL
step of each run (warm-up) is dropped; variants run in a rotating order each round.

The CPU fast path (`CpuLoptiGRPOTrainer`: each prompt once per group in the log-prob forwards) runs in every lopti
variant but the "padded" ones, which are `LoptiGRPOTrainer` on TRL's code paths, interleaved in the same run;
each variant also reports its update throughput against the matmul peak (6 · parameters · tokens · passes / update
seconds) and its rollout generation speed (completion tokens / seconds in `generate`).

Run: python bench/step_time.py --models tiny,smollm2-135m --markdown step_time.md  (docs/performance.md quotes it)
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
from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.models.loading import load_tokenizer, resolve_model
from lopti.tasks.registry import get_task
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

VARIANTS = {
    "trl": (GRPOTrainer, GRPOConfig, {}),
    "lopti-grpo": (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {}),
    "+ar": (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {"ar_alpha": 0.3}),
    "+lopti": (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {"lopti": True, "num_iterations": 2}),
    "lopti-grpo padded": (LoptiGRPOTrainer, LoptiGRPOConfig, {}),
    "+lopti padded": (LoptiGRPOTrainer, LoptiGRPOConfig, {"lopti": True, "num_iterations": 2}),
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
    """Return the best measured float32 matmul FLOP/s of the machine it runs on (with torch's current threads)."""
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

    rollout: list[float] = []
    rollout_tokens: list[int] = []
    generate_single = trainer._generate_single_turn

    def timed_rollout(*args, **kwargs):
        started = time.perf_counter()
        completion_ids, logprobs = generate_single(*args, **kwargs)
        rollout.append(time.perf_counter() - started)
        rollout_tokens.append(sum(len(ids) for ids in completion_ids))
        return completion_ids, logprobs

    trainer._generate_and_score_completions = timed
    trainer._generate_single_turn = timed_rollout
    trainer.train()
    whole = [sum(clock.steps[i : i + passes]) for i in range(0, len(clock.steps), passes)]
    update = [w - g for w, g in zip(whole, generation, strict=True)]
    return {
        "whole": statistics.median(whole[1:]),
        "update": statistics.median(update[1:]),
        "tokens": statistics.median(tokens[1:]),  # prompt + completion tokens of one generated batch
        "passes": passes,
        "rollout_tokens_per_second": statistics.median(
            n / t for n, t in zip(rollout_tokens[1:], rollout[1:], strict=True)
        ),
    }


RATIOS = [  # (label, numerator, denominator, part): each is reported when both variants ran
    ("+ AR / TRL (whole step)", "+ar", "trl", "whole"),
    ("+ AR / TRL (update)", "+ar", "trl", "update"),
    ("lopti GRPO / TRL (whole)", "lopti-grpo", "trl", "whole"),
    ("Lopti / GRPO (update per RL step)", "+lopti", "lopti-grpo", "update"),
    ("packed / padded, lopti GRPO (update)", "lopti-grpo", "lopti-grpo padded", "update"),
    ("packed / padded, + Lopti (update)", "+lopti", "+lopti padded", "update"),
    ("packed / padded, + Lopti (whole)", "+lopti", "+lopti padded", "whole"),
    ("rollout tokens/s, lopti GRPO / TRL (higher is faster)", "lopti-grpo", "trl", "rollout_tokens_per_second"),
]


def bench_model(model_name: str, rounds: int, rl_steps: int, peak: float, variants: list[str]) -> dict:
    path = resolve_model(model_name)
    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
    per_round = []
    for r in range(rounds):
        results = {}
        for variant in variants[r % len(variants) :] + variants[: r % len(variants)]:
            results[variant] = one_run(model_name, path, variant, rl_steps, seed=r)
            print(f"{model_name} round {r} {variant}: {results[variant]}", flush=True)
        per_round.append(results)

    def median(variant: str, key: str) -> float:
        return statistics.median(res[variant][key] for res in per_round)

    per_variant = {}
    for v in variants:
        update = median(v, "update")
        flops = 6 * params * per_round[0][v]["tokens"] * per_round[0][v]["passes"] / update
        per_variant[v] = {
            "whole": median(v, "whole"),
            "update": update,
            "update_tokens_per_second": per_round[0][v]["tokens"] * per_round[0][v]["passes"] / update,
            "update_flops": flops,
            "of_peak": flops / peak,
            "rollout_tokens_per_second": median(v, "rollout_tokens_per_second"),
        }
    ratios = {
        label: [round(res[a][part] / res[b][part], 3) for res in per_round]
        for label, a, b, part in RATIOS
        if a in variants and b in variants
    }
    return {"model": model_name, "parameters": params, "rounds": rounds, "variants": per_variant, "ratios": ratios,
            "matmul_peak_flops": peak}  # fmt: skip


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def markdown(results: list[dict], command: str, seconds: float) -> str:
    lines = [
        "# Performance",
        "",
        f"Produced by `{command}` ({torch.get_num_threads()} torch threads, CPU) in {seconds:.0f} s. "
        "Ratios are measured side by side in one run (variants interleaved, warm-up step dropped); "
        'min / median / max over rounds. "padded" variants are `LoptiGRPOTrainer`, what `cpu_fast_path: false` '
        "trains with (TRL's padded forward).",
        "",
        "| model | ratio | min / median / max |",
        "|---|---|---|",
    ]
    for r in results:
        lines += [f"| {r['model']} | {label} | {spread(values)} |" for label, values in r["ratios"].items()]
    lines += [
        "",
        "| model | variant | whole step s | update s | update tokens/s | update FLOP/s | of matmul peak "
        "| rollout tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for v, t in r["variants"].items():
            lines.append(
                f"| {r['model']} ({r['parameters'] / 1e6:.1f} M) | {v} | {t['whole']:.2f} | {t['update']:.2f} | "
                f"{t['update_tokens_per_second']:.0f} | {t['update_flops'] / 1e9:.1f} G | {100 * t['of_peak']:.0f}% | "
                f"{t['rollout_tokens_per_second']:.0f} |"
            )
    lines += [
        "",
        "Update FLOP/s count 6 · parameters · (prompt + completion tokens) · update passes per RL step, the work of "
        "TRL's padded forward without its padding, against the best measured 1024² float32 matmul "
        f"({results[0]['matmul_peak_flops'] / 1e9:.0f} GFLOP/s); packed variants do less work than that (each "
        "prompt once per group), so their share can pass 100%. Rollout tokens/s: completion tokens per second "
        "inside TRL's `generate`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny", help="comma-separated: tiny, smollm2-135m")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rl_steps", type=int, default=3, help="RL steps per run; the first is dropped")
    parser.add_argument("--markdown", help="write the results table to this file")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    started = time.perf_counter()
    peak = matmul_peak()
    results = [bench_model(m, args.rounds, args.rl_steps, peak, variants) for m in args.models.split(",")]
    print(json.dumps(results, indent=1))
    if args.markdown:
        command = (
            f"python bench/step_time.py --models {args.models} --variants '{args.variants}' --rounds {args.rounds} "
            f"--rl_steps {args.rl_steps} --markdown {args.markdown}"
        )
        Path(args.markdown).write_text(markdown(results, command, time.perf_counter() - started))


if __name__ == "__main__":
    main()
