"""Where the time of one generated batch of a recipe goes, with and without `cpu_fast_path`.

Builds the trainer exactly as `lopti train` does (the recipe `--config`, by default lopti/configs/kk-tiny-cpu.yaml
with its cached warm-started tiny model; `--set key=value` overrides one of its settings, the value read as YAML),
trains `--batches` generated batches (num_iterations updates each: two with Lopti) per variant, variants alternating
over `--rounds` (`--packed-only`: the fast path alone), drops each run's first batch (warm-up), and prints the
median seconds per generated batch of: generation (TRL's `generate`), the old log-prob forward (no gradient),
rewards, the rest of TRL's scoring (advantages, bookkeeping), the update forwards (with gradient), lopti's loss and
metrics, backward, and the optimizer step with logging. Also the share of padding in the update batches and of
prompt tokens among the real ones. One torch thread unless OMP_NUM_THREADS says otherwise.

Run: python bench/profile_step.py --batches 3 --rounds 2
SmolLM2-135M's math recipe: python bench/profile_step.py --config configs/math-smollm2-cpu.yaml --packed-only --rounds 1
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import time

import torch
import yaml
from transformers import TrainerCallback

from lopti.commands.arguments import SettingsLoader
from lopti.commands.settings import default_recipe, resolve, split
from lopti.commands.train_run import build_trainer
from lopti.tasks.registry import get_task
from lopti.train.config import LoptiGRPOConfig

COMPONENTS = (
    "generation", "old log-prob forward", "rewards", "other scoring", "update forwards", "loss and metrics",
    "backward", "optimizer step, logging",
)  # fmt: skip


class StepClock(TrainerCallback):
    def __init__(self, times: dict) -> None:
        self.times = times

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times["step"].append(time.perf_counter() - self.started)


def timed(times: dict, label: str, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        out = func(*args, **kwargs)
        times[label].append(time.perf_counter() - started)
        return out

    return wrapper


def one_run(config: str, changes: dict, batches: int, cpu_fast_path: bool) -> dict[str, float]:
    """Train `batches` generated batches of the recipe; return median seconds per batch of each component."""
    settings = resolve(config, changes)
    passes = settings.get("num_iterations", 1)  # updates per generated batch: Lopti's recipes take two
    settings |= {"max_steps": passes * batches, "output_dir": f"/tmp/lopti-bench/profile-{cpu_fast_path}",
                 "report_to": [], "save_strategy": "no", "evaluate": False, "cpu_fast_path": cpu_fast_path}  # fmt: skip
    run, trainer_kwargs = split(settings)
    trainer = build_trainer(get_task(run.task), run, LoptiGRPOConfig(**trainer_kwargs)).trainer
    times = collections.defaultdict(list)
    for name, label in (("_generate_single_turn", "generate"), ("_generate_and_score_completions", "scoring"),
                        ("_calculate_rewards", "rewards"), ("training_step", "training_step")):  # fmt: skip
        setattr(trainer, name, timed(times, label, getattr(trainer, name)))
    logps = trainer._get_per_token_logps_and_entropies

    def forward(*args, **kwargs):
        started = time.perf_counter()
        out = logps(*args, **kwargs)
        times["forward" if torch.is_grad_enabled() else "old forward"].append(time.perf_counter() - started)
        return out

    trainer._get_per_token_logps_and_entropies = forward
    loss = trainer._compute_loss

    def compute_loss(model, inputs):
        started = time.perf_counter()
        out = loss(model, inputs)
        times["compute_loss"].append(time.perf_counter() - started)
        prompt, completion = inputs["prompt_mask"], inputs["completion_mask"]
        real = int(prompt.sum() + completion.sum())
        times["padding share"].append(1 - real / (prompt.numel() + completion.numel()))
        times["prompt share"].append(int(prompt.sum()) / real)
        return out

    trainer._compute_loss = compute_loss
    trainer.add_callback(StepClock(times))
    trainer.train()

    def per_batch(key: str) -> list[float]:
        values = times[key]
        per = len(values) // batches
        return [sum(values[i * per : (i + 1) * per]) for i in range(1, batches)]  # warm-up batch dropped

    parts = {key: per_batch(key) for key in ("generate", "scoring", "rewards", "old forward", "forward",
                                             "compute_loss", "training_step", "step")}  # fmt: skip
    rows = {
        "generation": parts["generate"],
        "old log-prob forward": parts["old forward"],
        "rewards": parts["rewards"],
        "other scoring": [s - g - o - r for s, g, o, r in zip(
            parts["scoring"], parts["generate"], parts["old forward"], parts["rewards"], strict=True)],
        "update forwards": parts["forward"],
        "loss and metrics": [c - f for c, f in zip(parts["compute_loss"], parts["forward"], strict=True)],
        "backward": [t - s - c for t, s, c in
                     zip(parts["training_step"], parts["scoring"], parts["compute_loss"], strict=True)],
        "optimizer step, logging": [s - t for s, t in zip(parts["step"], parts["training_step"], strict=True)],
        "whole batch": parts["step"],
    }  # fmt: skip
    result = {name: statistics.median(values) for name, values in rows.items()}
    result["padding share"] = statistics.median(times["padding share"])
    result["prompt share"] = statistics.median(times["prompt share"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="generated batches per run; the first is dropped")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--config", default=str(default_recipe("kk")), help="the recipe to profile")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    parser.add_argument("--packed-only", action="store_true", help="profile the fast path alone")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if malformed := [item for item in args.set if "=" not in item]:
        parser.error(f"--set takes KEY=VALUE, got {malformed[0]!r}")
    changes = {
        key: yaml.load(value, Loader=SettingsLoader) for key, _, value in (item.partition("=") for item in args.set)
    }
    variants = (True,) if args.packed_only else (False, True)
    results: dict[bool, list[dict]] = {pack: [] for pack in variants}
    for r in range(args.rounds):
        for pack in variants if r % 2 == 0 else variants[::-1]:
            results[pack].append(one_run(args.config, changes, args.batches, pack))
    median = {pack: {k: statistics.median(res[k] for res in runs) for k in runs[0]} for pack, runs in results.items()}
    new = median[True]
    if args.packed_only:
        print(f"| component | packed s | share |  ({torch.get_num_threads()} thread)\n|---|---|---|")
        for name in (*COMPONENTS, "whole batch"):
            print(f"| {name} | {new[name]:.2f} | {100 * new[name] / new['whole batch']:.0f}% |")
        print(f"prompt tokens among the real ones: {100 * new['prompt share']:.0f}%")
        return
    old = median[False]
    print(f"| component | padded s | share | packed s | share | packed / padded |  ({torch.get_num_threads()} thread)")
    print("|---|---|---|---|---|---|")
    for name in (*COMPONENTS, "whole batch"):
        print(
            f"| {name} | {old[name]:.2f} | {100 * old[name] / old['whole batch']:.0f}% | {new[name]:.2f} | "
            f"{100 * new[name] / new['whole batch']:.0f}% | {new[name] / max(old[name], 1e-9):.2f} |"
        )
    print(f"padding share of the update batches: {100 * old['padding share']:.0f}%; "
          f"prompt tokens among the real ones: {100 * old['prompt share']:.0f}%")  # fmt: skip


if __name__ == "__main__":
    main()
