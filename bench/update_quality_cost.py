"""Cost of `update_quality_every`: RL step time with the update-quality forward passes against without them.

Side by side in one run, as bench/step_time.py measures (its one_run: lr 1e-9 so that every run generates
the same completions, the first RL step dropped, the order rotated each round): GRPO and AR + Lopti (the
default recipe's method), each with update_quality_every = 0 (off) and 1 (every RL step: the worst
case; one extra forward pass without gradients per RL step, two with Lopti, after phase 1 and after
phase 2). With K > 1 the added time is the K = 1 overhead divided by K. The measurement runs in a callback
after step_time's clock has stopped, so it is clocked on its own and added to the step time; on a shared CPU
its own time is also the steadier number (a difference of two step times carries both runs' noise).

Run (about 4 minutes on 2 busy cores with the defaults):
    nice python bench/update_quality_cost.py --model tiny-base --rounds 3 --rl_steps 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import step_time  # bench/step_time.py: this script runs from bench/ (python bench/update_quality_cost.py)

from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.models.loading import resolve_model
from lopti.train.config import LoptiGRPOConfig
from lopti.train.update_quality import UpdateQuality

LOPTI = {"ar_alpha": 0.3, "lopti": True, "num_iterations": 2}
VARIANTS = {
    name: (CpuLoptiGRPOTrainer, LoptiGRPOConfig, extra)
    for name, extra in {
        "grpo": {},
        "grpo+quality": {"update_quality_every": 1},
        "ar+lopti": LOPTI,
        "ar+lopti+quality": {**LOPTI, "update_quality_every": 1},
    }.items()
}


def clock_measurements() -> list[float]:
    """Make UpdateQuality.on_step_end record the seconds of each measurement it takes; return the record."""
    spent: list[float] = []
    measure = UpdateQuality.on_step_end

    def timed(self, *args, **kwargs):
        due, started = self.due, time.perf_counter()
        measure(self, *args, **kwargs)
        if due is not None:
            spent.append(time.perf_counter() - started)

    UpdateQuality.on_step_end = timed
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-base", help="tiny, tiny-base (same architecture) or smollm2-135m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rl_steps", type=int, default=4, help="RL steps per run; the first is dropped")
    args = parser.parse_args()
    shape = "tiny" if args.model.startswith("tiny") else args.model  # step_time's batch shape for the model
    path = resolve_model(args.model)
    spent = clock_measurements()
    order = list(VARIANTS)
    per_round = []
    for r in range(args.rounds):
        results = {}
        for name in order[r % len(order) :] + order[: r % len(order)]:
            before = len(spent)
            results[name] = step_time.one_run(shape, path, name, args.rl_steps, seed=r, variants=VARIANTS)
            results[name]["measuring"] = sum(spent[before:]) / args.rl_steps  # seconds per RL step
            print(f"round {r} {name}: {results[name]}", flush=True)
        per_round.append(results)
    summary = {"model": args.model, "rounds": args.rounds, "rl_steps": args.rl_steps}
    for method in ("grpo", "ar+lopti"):
        for part in ("whole", "update"):
            on = [res[f"{method}+quality"] for res in per_round]
            ratios = [(q[part] + q["measuring"]) / res[method][part] for q, res in zip(on, per_round, strict=True)]
            summary[f"{method}: quality / off ({part} RL step)"] = [round(x, 3) for x in ratios]
        measuring = statistics.median(res[f"{method}+quality"]["measuring"] for res in per_round)
        whole = statistics.median(res[method]["whole"] for res in per_round)
        summary[f"{method}: seconds per RL step off (median)"] = round(whole, 3)
        summary[f"{method}: seconds measuring per RL step (median)"] = round(measuring, 3)
        summary[f"{method}: measuring / RL step off"] = round(measuring / whole, 3)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
