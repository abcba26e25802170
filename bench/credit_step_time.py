"""Step time of lopti's GRPO against GRPO + each per-token credit preset, interleaved in one run, as ratios.

Target: with any preset the step stays within 3% of GRPO's, except presets that need an
extra forward or backward pass (none of the current ones does: they read the log-probs and entropies of
the loss's own forward pass). Same protocol as bench/step_time.py: a tiny learning rate so that every
variant generates the same completions, the first RL step dropped, variants in a rotating order each
round; "update" is the step minus generation, where the presets' work happens. On a shared machine the
step ratios carry the load of other processes, so the script also times the loss alone (`token_objective`
forward and backward on one micro-batch of the same shape, variants interleaved, median of many
repeats) and reports each preset's added milliseconds as a share of GRPO's update.

Run: nice python bench/credit_step_time.py --model tiny --rounds 3 --rl_steps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from step_time import SHAPES, one_run, spread  # bench/ is the script's folder, so it is on sys.path

from lopti.core import PRESETS, aggregate_loss, make_credit_steps, token_objective
from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.models.loading import resolve_model
from lopti.train.config import LoptiGRPOConfig

BASELINE = "grpo"
VARIANTS = {
    BASELINE: (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {}),
    **{name: (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {"token_credit": [name]}) for name in PRESETS},
    "ar+stapo": (CpuLoptiGRPOTrainer, LoptiGRPOConfig, {"ar_alpha": 0.3, "token_credit": ["stapo"]}),
}


def bench(model_name: str, rounds: int, rl_steps: int) -> dict:
    """Return the median seconds per variant and each variant's per-round ratios to GRPO."""
    path = resolve_model(model_name)
    order = list(VARIANTS)
    per_round = []
    for r in range(rounds):
        results = {}
        for variant in order[r % len(order) :] + order[: r % len(order)]:
            results[variant] = one_run(model_name, path, variant, rl_steps, seed=r, variants=VARIANTS)
            print(f"{model_name} round {r} {variant}: {results[variant]}", flush=True)
        per_round.append(results)
    return {
        "model": model_name,
        "rounds": rounds,
        "rl_steps": rl_steps,
        "median_seconds": {
            v: {part: statistics.median(res[v][part] for res in per_round) for part in ("whole", "update")}
            for v in VARIANTS
        },
        "ratios": {
            v: {
                part: [round(res[v][part] / res[BASELINE][part], 3) for res in per_round]
                for part in ("whole", "update")
            }
            for v in VARIANTS
            if v != BASELINE
        },
    }


def objective_seconds(model_name: str, repeats: int) -> dict[str, float]:
    """Return the median seconds of the loss's forward and backward on one micro-batch, per variant."""
    completions, group, length, _, _ = SHAPES[model_name]
    generator = torch.Generator().manual_seed(0)
    old = -5.0 * torch.rand(completions, length, generator=generator)
    shift = 0.05 * torch.randn(completions, length, generator=generator)
    advantages = torch.randn(completions // group, 1, generator=generator).repeat_interleave(group, 0)
    advantages = advantages.expand(completions, length)
    mask = torch.rand(completions, length, generator=generator) < 0.9
    entropies = 3.0 * torch.rand(completions, length, generator=generator)
    timings: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(repeats):
        for variant, (_, _, extra) in VARIANTS.items():
            credit = make_credit_steps(extra.get("token_credit", []))
            started = time.perf_counter()
            logprobs = (old + shift).requires_grad_()
            terms = token_objective(
                logprobs, old, advantages, mask, alpha=extra.get("ar_alpha", 0.0), entropies=entropies, credit=credit
            )
            aggregate_loss(terms.policy, terms.counted).backward()
            timings[variant].append(time.perf_counter() - started)
    return {v: statistics.median(t) for v, t in timings.items()}


def markdown(result: dict, command: str) -> str:
    completions, _, length, _, _ = SHAPES[result["model"]]
    lines = [
        f"Produced by `{command}` ({torch.get_num_threads()} torch thread(s), CPU, {completions} completions × "
        f"≤ {length} tokens per RL step). Ratios to GRPO, min / median / max over {result['rounds']} rounds:",
        "",
        "| variant | whole step / GRPO | update / GRPO | median update s |",
        "|---|---|---|---|",
    ]
    for variant, ratios in result["ratios"].items():
        seconds = result["median_seconds"][variant]["update"]
        lines.append(f"| {variant} | {spread(ratios['whole'])} | {spread(ratios['update'])} | {seconds:.3f} |")
    base = result["median_seconds"][BASELINE]
    lines.append(f"| {BASELINE} | 1 | 1 | {base['update']:.3f} (whole step {base['whole']:.2f} s) |")
    loss = result["objective_seconds"]
    lines += [
        "",
        f"The loss alone (forward + backward of `token_objective` on one {completions} × {length} micro-batch, "
        f"median of {result['objective_repeats']} interleaved repeats); added time as a share of GRPO's median "
        "update above:",
        "",
        "| variant | loss ms | added ms | added / GRPO update |",
        "|---|---|---|---|",
    ]
    for variant, seconds in loss.items():
        added = seconds - loss[BASELINE]
        lines.append(f"| {variant} | {1e3 * seconds:.2f} | {1e3 * added:+.2f} | {100 * added / base['update']:+.3f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rl_steps", type=int, default=3, help="RL steps per run; the first is dropped")
    parser.add_argument("--objective_repeats", type=int, default=200, help="repeats of the loss-only timing")
    parser.add_argument("--markdown", help="write the results table to this file")
    args = parser.parse_args()
    result = bench(args.model, args.rounds, args.rl_steps)
    result["objective_repeats"] = args.objective_repeats
    result["objective_seconds"] = objective_seconds(args.model, args.objective_repeats)
    print(json.dumps(result, indent=1))
    if args.markdown:
        command = f"python bench/credit_step_time.py --model {args.model} --rounds {args.rounds}"
        command += f" --rl_steps {args.rl_steps} --objective_repeats {args.objective_repeats}"
        Path(args.markdown).write_text(markdown(result, command))


if __name__ == "__main__":
    main()
