"""A long `lopti train` run of the tiny model: resident memory over time, one metrics row per step, checkpoint
rotation, and a SIGKILL at a random moment that resumes to the same weights.

Two runs of the embedded kk-tiny-cpu recipe at tiny settings (short completions, small batches, no evaluation):
- `whole` trains `--steps` steps uninterrupted, checkpoints every `--save_steps`; its resident memory (VmRSS) is
  sampled every second, and the script prints it at 10%, 50% and 100% of the run and its growth from 10% on
  (after warm-up: the model, TRL and the first checkpoint are in memory by then);
- `cut` trains the same, is killed with SIGKILL at a random moment (`--kill_seed`), then resumed with
  `lopti train --resume`; its final weights must equal `whole`'s, byte for byte.
Each run's metrics.jsonl must have exactly one training row per step, and its folder exactly `save_total_limit`
checkpoints. The script exits with status 1 if a check fails.

Run: nice -n 19 env OMP_NUM_THREADS=1 python bench/long_run.py --steps 1000 --save_steps 50 --out /tmp/long_run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

# 48 answer tokens: the warm start's immediate answers (~30 tokens) finish, so rewards differ within groups and
# the policy moves (with 16, every answer is cut short, every reward is -3 and no gradient is ever non-zero)
TINY = {
    "evaluate": "false", "per_device_train_batch_size": "8", "num_generations": "4", "max_completion_length": "48",
    "report_to": "none", "disable_tqdm": "true", "logging_steps": "1",
}  # fmt: skip


def train_command(out: Path, steps: int, save_steps: int, keep: int, resume: bool = False) -> list[str]:
    """Return the `lopti train` command of one run into `out` (with `--resume`: its continuation)."""
    command = [sys.executable, "-m", "lopti.cli", "train", "--output_dir", str(out)]
    if resume:
        return [*command, "--resume"]
    settings = {**TINY, "max_steps": steps, "save_steps": save_steps, "save_total_limit": keep}
    return command + [word for key, value in settings.items() for word in (f"--{key}", str(value))]


def resident_mib(pid: int) -> float | None:
    """Return the resident memory of process `pid` in MiB (None once it has ended)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def last_step(out: Path) -> int:
    """Return the latest step metrics.jsonl records (0 before the first)."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = [json.loads(line).get("step", 0) for line in path.read_text().splitlines() if line.endswith("}")]
    return max(steps, default=0)


def watch(command: list[str], out: Path, kill_at: int | None = None) -> list[tuple[float, int, float]]:
    """Run `command`, sampling (seconds, step, resident MiB) every second; SIGKILL it once step `kill_at` is
    logged. Return the samples."""
    log = (out.parent / f"{out.name}.log").open("a")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    started, samples = time.monotonic(), []
    while process.poll() is None:
        memory, step = resident_mib(process.pid), last_step(out)
        if memory is not None:
            samples.append((time.monotonic() - started, step, memory))
        if kill_at is not None and step >= kill_at:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return samples
        time.sleep(1)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} ended with status {process.returncode}; see {log.name}")
    return samples


def memory_at(samples: list[tuple[float, int, float]], share: float, steps: int) -> float:
    """Return the resident MiB of the first sample at or after `share` of the run's steps."""
    return next(memory for _, step, memory in samples if step >= share * steps)


def steps_with_gradient(out: Path, after: int = 0) -> int:
    """Return how many training rows of `out`'s metrics.jsonl after step `after` have a non-zero gradient norm."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return sum(row.get("grad_norm", 0.0) > 0 for row in rows if "loss" in row and row["step"] > after)


def checks(out: Path, steps: int, keep: int) -> list[str]:
    """Return what is wrong with a finished run folder: metrics rows per step, number of checkpoints."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [row["step"] for row in rows if "loss" in row]
    problems = [] if logged == list(range(1, steps + 1)) else [f"{out}: training rows {logged[:5]}... not 1..{steps}"]
    checkpoints = sorted(out.glob("checkpoint-*"))
    if len(checkpoints) != keep:
        problems.append(f"{out}: {len(checkpoints)} checkpoints ({[c.name for c in checkpoints]}), not {keep}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--save_steps", type=int, default=50)
    parser.add_argument("--save_total_limit", type=int, default=2)
    parser.add_argument("--kill_seed", type=int, default=0, help="Seed of the step at which `cut` is killed.")
    parser.add_argument("--out", type=Path, default=Path("/tmp/long_run"))
    args = parser.parse_args()
    whole, cut = args.out / "whole", args.out / "cut"
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"{args.out} is not empty; choose another --out")
    args.out.mkdir(parents=True, exist_ok=True)
    keep = args.save_total_limit

    started = time.monotonic()
    samples = watch(train_command(whole, args.steps, args.save_steps, keep), whole)
    seconds = time.monotonic() - started
    early, middle, end = (memory_at(samples, share, args.steps) for share in (0.1, 0.5, 1.0))
    print(f"whole: {args.steps} steps in {seconds:.0f} s ({seconds / args.steps:.2f} s/step)")
    print(
        f"resident memory: {early:.0f} MiB at step {args.steps // 10}, {middle:.0f} MiB at {args.steps // 2}, "
        f"{end:.0f} MiB at {args.steps}; peak {max(m for *_, m in samples):.0f} MiB; growth from 10% on "
        f"{end - early:+.0f} MiB ({100 * (end - early) / early:+.1f}%)"
    )

    kill_at = random.Random(args.kill_seed).randrange(1, args.steps)
    watch(train_command(cut, args.steps, args.save_steps, keep), cut, kill_at=kill_at)
    print(f"cut: killed with SIGKILL once step {kill_at} was logged (at step {last_step(cut)}); resuming")
    resumed_from = max(int(folder.name.split("-")[1]) for folder in cut.glob("checkpoint-*"))  # or an older one
    watch(train_command(cut, args.steps, args.save_steps, keep, resume=True), cut)
    same = (whole / "final" / "model.safetensors").read_bytes() == (cut / "final" / "model.safetensors").read_bytes()
    print(f"final weights of the resumed run {'equal' if same else 'DIFFER FROM'} the uninterrupted run's")
    learning = steps_with_gradient(whole, after=resumed_from)
    print(f"steps with a non-zero gradient: {steps_with_gradient(whole)} of {args.steps}; {learning} of them after "
          f"step {resumed_from}, the checkpoint the resume started from")  # fmt: skip

    problems = checks(whole, args.steps, keep) + checks(cut, args.steps, keep) + ([] if same else ["weights"])
    if learning == 0:  # equal weights would then show only that a resume restores a model that does not move
        problems.append(f"no step after {resumed_from} had a non-zero gradient")
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print(f"metrics.jsonl: one training row per step in both runs; {keep} checkpoints kept in each")
    print(f"total {time.monotonic() - started:.0f} s; logs in {args.out}/*.log")
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
