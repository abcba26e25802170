"""GPU check: `LoptiGRPOTrainer` on TRL's own GPU paths (bf16, no CPU fast path) for a few steps, with GRPO and
with AR + Lopti, and TRL's plain `GRPOTrainer` beside them; prints the step-time ratios AR + Lopti / GRPO and
lopti's GRPO / plain GRPOTrainer, per generated batch (Lopti trains two optimizer steps on each).

Made for a CUDA machine that has torch and transformers but no TRL and no network. Here, with network:
    bench/gpu_wheels.sh                               # the missing wheels into bench/gpu_wheels/ (63 MiB)
there, from the checkout:
    python bench/gpu_check.py --wheels bench/gpu_wheels
which installs the wheels whose package is not installed yet (pip, no index, no dependencies), builds a tiny
model (lopti.tasks.kk.tiny, random weights) and trains it. lopti runs from the checkout, not from a wheel.
`--dry_run` does the same on the CPU at a tiny size (tests/bench/test_gpu_check.py runs it in CI).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def missing_wheels(folder: Path) -> list[Path]:
    """Return the wheels in `folder` whose distribution is not installed (a wheel's name starts with it)."""
    missing = []
    for wheel in sorted(folder.glob("*.whl")):
        try:
            importlib.metadata.version(wheel.name.split("-")[0])
        except importlib.metadata.PackageNotFoundError:
            missing.append(wheel)
    return missing


def install(folder: Path) -> None:
    """Install `folder`'s wheels that are missing, without the index or dependencies: the folder is the set."""
    wheels = missing_wheels(folder)
    print(f"gpu_check: installing {len(wheels)} wheels: {' '.join(w.name.split('-')[0] for w in wheels) or '-'}")
    if wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", *map(str, wheels)], check=True
        )
        importlib.invalidate_caches()


def step_timer(cuda: bool):
    """Return a callback that keeps each optimizer step's wall time (after a CUDA sync, so the GPU's work counts)."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.seconds.append(time.perf_counter() - self.started)

    return StepTimer()


def train(name: str, model_dir: Path, prompts, options: dict, batches: int, cuda: bool) -> dict:
    """Train variant `name` for `batches` generated batches; return its seconds per batch after the first."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from lopti.cpu.fast_path import CpuFastPath
    from lopti.train.config import LoptiGRPOConfig
    from lopti.train.trainer import LoptiGRPOTrainer

    lopti_options = {"grpo": {}, "ar+lopti": {"ar_alpha": 0.3, "lopti": True, "num_iterations": 2}}.get(name)
    config = GRPOConfig if lopti_options is None else LoptiGRPOConfig
    extra = {} if lopti_options is None else lopti_options
    steps_per_batch = 2 if name == "ar+lopti" else 1
    args = config(output_dir=tempfile.mkdtemp(), max_steps=batches * steps_per_batch, **options, **extra)
    trainer = (GRPOTrainer if lopti_options is None else LoptiGRPOTrainer)(
        model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=[odd_tokens], args=args,
        train_dataset=prompts, processing_class=AutoTokenizer.from_pretrained(model_dir),
    )  # fmt: skip
    if lopti_options is not None:
        assert trainer.optimizer_steps_per_batch() == steps_per_batch
    trainer.remove_callback(PrinterCallback)  # the log dicts of every step
    timer = step_timer(cuda)
    trainer.add_callback(timer)
    trainer.train()
    device = trainer.accelerator.device
    assert (device.type == "cuda") == cuda, device
    assert not isinstance(trainer, CpuFastPath)  # every forward and the rollout were TRL's
    per_batch = [sum(timer.seconds[i : i + steps_per_batch]) for i in range(0, len(timer.seconds), steps_per_batch)]
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    return {
        "seconds_per_batch": sum(per_batch[1:]) / len(per_batch[1:]),
        "batches_timed": len(per_batch) - 1,
        "completion_mean_length": sum(lengths) / len(lengths),  # generation dominates: equal lengths, fair times
    }


def odd_tokens(completion_ids, **kwargs) -> list[float]:
    """Reward: the share of odd token ids in a completion (cheap, and different within a group, so that every
    step has a gradient)."""
    return [sum(token % 2 for token in ids) / max(len(ids), 1) for ids in completion_ids]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, help="folder of wheels to install first (bench/gpu_wheels.sh)")
    parser.add_argument("--dry_run", action="store_true", help="on the CPU, float32, a tiny model and batch")
    parser.add_argument("--batches", type=int, default=6, help="generated batches per variant (the first is warm-up)")
    parser.add_argument(
        "--rounds", type=int, default=2,
        help="rounds over the variants, every other one in reverse order, so that no variant always runs first",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    options = parser.parse_args(argv)
    if options.wheels is not None:
        install(options.wheels)
    sys.path.insert(0, str(ROOT))  # lopti from the checkout
    import torch
    import transformers
    import trl
    from datasets import Dataset

    from lopti.tasks.kk.tiny import build_model, build_tokenizer, kk_corpus

    cuda = not options.dry_run
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device (use --dry_run on the CPU)")
    size = dict(hidden_size=32, layers=2, heads=2) if options.dry_run else dict(hidden_size=256, layers=4, heads=4)
    batch = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=8) if options.dry_run else (
        dict(per_device_train_batch_size=32, num_generations=8, max_completion_length=128))  # fmt: skip
    common = dict(
        **batch, learning_rate=1e-5, bf16=cuda, use_cpu=not cuda, logging_steps=1, save_strategy="no",
        report_to=[], disable_tqdm=True, seed=0,
    )  # fmt: skip
    corpus = kk_corpus(puzzles_per_size=10)
    tokenizer = build_tokenizer(corpus)
    model_dir = Path(tempfile.mkdtemp())
    build_model(tokenizer, **size).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    prompts = Dataset.from_dict({"prompt": [text[:160] for text in corpus[:64]]})
    device = torch.cuda.get_device_name() if cuda else "CPU"
    print(f"gpu_check: {device}; torch {torch.__version__}, transformers {transformers.__version__}, trl "
          f"{trl.__version__}; {size}; {batch}; {'bf16' if cuda else 'float32'}")  # fmt: skip
    names = ("trl", "grpo", "ar+lopti")
    train("trl", model_dir, prompts, common, 2, cuda)  # warm-up, untimed: the process's first CUDA work is slower
    rounds = [{} for _ in range(options.rounds)]
    for number, round_runs in enumerate(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            round_runs[name] = train(name, model_dir, prompts, common, options.batches, cuda)
    runs = {
        name: {
            "seconds_per_batch": sum(r[name]["seconds_per_batch"] for r in rounds) / len(rounds),
            "batches_timed": sum(r[name]["batches_timed"] for r in rounds),
            "completion_mean_length": sum(r[name]["completion_mean_length"] for r in rounds) / len(rounds),
            "rounds": [r[name]["seconds_per_batch"] for r in rounds],
        }
        for name in names
    }
    seconds = {name: run["seconds_per_batch"] for name, run in runs.items()}
    result = {
        "device": device,
        "runs": runs,
        "ar_lopti_over_grpo": seconds["ar+lopti"] / seconds["grpo"],
        "lopti_grpo_over_trl": seconds["grpo"] / seconds["trl"],
    }
    for name, run in runs.items():
        print(
            f"  {name:9} {run['seconds_per_batch']:.4f} s per generated batch ({run['batches_timed']} timed; rounds "
            f"{', '.join(f'{s:.4f}' for s in run['rounds'])}), completions {run['completion_mean_length']:.1f} tokens"
        )  # fmt: skip
    print(f"AR + Lopti / GRPO: {result['ar_lopti_over_grpo']:.3f}×; lopti GRPO / GRPOTrainer: "
          f"{result['lopti_grpo_over_trl']:.3f}×")  # fmt: skip
    if options.out is not None:
        options.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
