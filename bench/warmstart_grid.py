"""A shorter warm start: build a small grid of cheaper SFT settings, time each, and compare each with the
reference warm start (9,000 SFT puzzles; `--previous`) on a validation set; then the chosen one's held-out
numbers next to the reference's.

The grid and the selection rule were fixed before anything was measured (docs/performance.md, "A shorter warm
start"). The validation set holds training-form puzzles (so none is in any held-out test split) that are not in
the reference's 9,000 SFT puzzles, of which every grid point's SFT puzzles are a prefix. On it, per
model: greedy accuracy, the share of greedy answers that are the teacher's guess (everyone a knight), and 8
samples at T = 1 (pass@1, pass@8), per size; format errors. Built models and measurements are kept in --out,
so a rerun only does what is missing.

Run (1 torch thread, as measured; PREVIOUS: the cached folder of the reference warm start):
  OMP_NUM_THREADS=1 python bench/warmstart_grid.py --out results/warmstart-grid --previous PREVIOUS
  OMP_NUM_THREADS=1 python bench/warmstart_grid.py --out results/warmstart-grid --previous PREVIOUS --held-out F
Without --previous, the reference warm start is built too (282 steps, about 12 minutes on one shared core).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

from lopti.commands.eval_run import EvalConfig, run_eval
from lopti.commands.settings import from_run_config
from lopti.evaluation.scoring import evaluate_rows, judge_rows, summarise
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.models.warmstart import WarmStartConfig, sft_dataset, warm_start
from lopti.tasks.kk.data import kk_records, parse_people, puzzle_record
from lopti.tasks.kk.generate import generate_puzzles, is_train_form
from lopti.tasks.kk.logic import canonical_key
from lopti.tasks.kk.prompts import trainer_prompt
from lopti.tasks.registry import get_task

RECIPE = Path(__file__).resolve().parent.parent / "lopti" / "configs" / "kk-tiny-cpu.yaml"
PREVIOUS = WarmStartConfig(puzzles_per_size=4500, learning_rate=2e-3, batch_size=32)  # the default at commit 4faa4ff
GRID = {
    "A": replace(PREVIOUS, puzzles_per_size=2000, learning_rate=3e-3),
    "B": replace(PREVIOUS, puzzles_per_size=2500, learning_rate=2e-3),
    "C": replace(PREVIOUS, puzzles_per_size=2500, learning_rate=3e-3),
    "D": replace(PREVIOUS, puzzles_per_size=2800, learning_rate=3e-3),
    # Round 2, registered after round 1 found no passing point: D's examples in twice the steps.
    "E": replace(PREVIOUS, puzzles_per_size=2800, batch_size=16, learning_rate=2e-3),
    "F": replace(PREVIOUS, puzzles_per_size=2800, batch_size=16, learning_rate=3e-3),
}
VALIDATION_SEED = "warm-start-validation"
SAMPLES, TEMPERATURE, MAX_NEW_TOKENS = 8, 1.0, 48  # the recipe's eval_max_new_tokens
# Tolerances against the reference warm start on the validation set (points); see docs/performance.md.
GREEDY_TOL, PASS1_TOL, PASS8_TOL, PASS8_SIZE_TOL = 1.0, 1.5, 3.0, 5.0
MIN_GUESS_SHARE, MAX_FORMAT_ERROR = 0.95, 0.01


def validation_rows(per_size: int) -> list[dict]:
    """Return evaluation rows of training-form puzzles that are in none of the SFT sets (the previous one's holds
    every grid point's: same seed, so a smaller set is a prefix of it)."""
    sft = kk_records(PREVIOUS.people, train=PREVIOUS.puzzles_per_size, test=0, seed=PREVIOUS.seed,
                     template=PREVIOUS.template, fixed_names=PREVIOUS.fixed_names)["train"]  # fmt: skip
    seen = {canonical_key(r["statements"]) for r in sft}
    rows = []
    for size in parse_people(PREVIOUS.people):
        puzzles = generate_puzzles(per_size, size, VALIDATION_SEED, exclude=seen, keep=is_train_form)
        for index, puzzle in enumerate(puzzles):
            record = puzzle_record(puzzle, "validation", index, VALIDATION_SEED, PREVIOUS.template,
                                   fixed_names=PREVIOUS.fixed_names)  # fmt: skip
            keep = ("id", "people", "names", "solution", "roles")
            rows.append({"prompt": trainer_prompt(record["prompt"], PREVIOUS.template), **{k: record[k] for k in keep}})
    return rows


def build(folder: Path, config: WarmStartConfig) -> dict:
    """Train the warm start `config` into `folder` unless it is there; return its SFT seconds, steps, examples."""
    timing_path = folder / "sft.json"
    if timing_path.exists():
        return json.loads(timing_path.read_text())
    shutil.rmtree(folder, ignore_errors=True)  # a build that did not finish
    started = time.perf_counter()
    warm_start(resolve_model("tiny-base"), folder, config)
    seconds = time.perf_counter() - started
    shutil.rmtree(folder / "sft-work", ignore_errors=True)
    examples = len(sft_dataset(config))
    timing = {"seconds": round(seconds, 1), "steps": math.ceil(examples / config.batch_size), "examples": examples,
              "config": asdict(config)}  # fmt: skip
    timing_path.write_text(json.dumps(timing, indent=1))
    return timing


def measure(model_folder: Path, rows: list[dict], path: Path) -> dict:
    """Return the validation metrics of the model in `model_folder`, kept in `path` (measured once)."""
    if path.exists():
        return json.loads(path.read_text())
    task = get_task("kk")
    model, tokenizer = load_model(str(model_folder)), load_tokenizer(str(model_folder))

    def is_guess(text: str, row: dict) -> tuple[bool, bool]:
        return task.judge(text, {**row, "solution": [True] * row["people"]})

    def run(judge, samples: int, temperature: float) -> dict:
        return evaluate_rows(model, tokenizer, rows, judge, task.group, samples, temperature, MAX_NEW_TOKENS)

    guess = judge_rows(model, tokenizer, rows, is_guess, task.group, 1, 0.0, MAX_NEW_TOKENS)
    result = {
        "greedy": run(task.judge, 1, 0.0),
        "guess": summarise(guess, task.group, 1, 0.0),
        "sampled": run(task.judge, SAMPLES, TEMPERATURE),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return result


def headline(result: dict) -> dict:
    """Return the numbers the rule looks at, in points (per size as 'pass@8 3' etc.)."""
    greedy, sampled = result["greedy"]["overall"], result["sampled"]["overall"]
    numbers = {
        "greedy": 100 * greedy["accuracy"],
        "guess share": 100 * result["guess"]["overall"]["accuracy"],
        "pass@1": 100 * sampled["pass@1"],
        f"pass@{SAMPLES}": 100 * sampled[f"pass@{SAMPLES}"],
        "format errors": 100 * max(greedy["format_error"], sampled["format_error"]),
    }
    for size, stats in result["sampled"]["per_group"].items():
        numbers[f"greedy {size}p"] = 100 * result["greedy"]["per_group"][size]["accuracy"]
        numbers[f"pass@1 {size}p"] = 100 * stats["pass@1"]
        numbers[f"pass@{SAMPLES} {size}p"] = 100 * stats[f"pass@{SAMPLES}"]
    return numbers


def failures(numbers: dict, reference: dict) -> list[str]:
    """Return the pre-registered criteria that `numbers` misses against `reference` (empty: it passes)."""
    missed = []
    for key, tol in [("greedy", GREEDY_TOL), ("pass@1", PASS1_TOL), (f"pass@{SAMPLES}", PASS8_TOL)]:
        if abs(numbers[key] - reference[key]) > tol:
            missed.append(f"{key} {numbers[key] - reference[key]:+.1f}")
    for key in [k for k in reference if k.startswith(f"pass@{SAMPLES} ")]:
        if abs(numbers[key] - reference[key]) > PASS8_SIZE_TOL:
            missed.append(f"{key} {numbers[key] - reference[key]:+.1f}")
    if numbers["guess share"] < 100 * MIN_GUESS_SHARE:
        missed.append(f"guess share {numbers['guess share']:.1f}%")
    if numbers["format errors"] > 100 * MAX_FORMAT_ERROR:
        missed.append(f"format errors {numbers['format errors']:.1f}%")
    return missed


def held_out(folder: Path, model: str) -> dict:
    """Return the held-out numbers of `model` as `lopti eval --config <recipe>` gives them (greedy and sampled)."""
    settings = {k: v for k, v in from_run_config(str(RECIPE), EvalConfig).items() if k != "model"}
    greedy = run_eval(EvalConfig(model=model, **settings), folder / "greedy")
    sampled = run_eval(
        EvalConfig(model=model, **settings, samples=SAMPLES, temperature=TEMPERATURE), folder / "sampled"
    )
    return headline({"greedy": greedy, "guess": {"overall": {"accuracy": float("nan")}}, "sampled": sampled})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/warmstart-grid", help="Folder for the models and measurements.")
    parser.add_argument("--previous", help="Folder of the reference warm start (else it is built into --out).")
    parser.add_argument("--per-size", type=int, default=450, help="Validation puzzles per size.")
    parser.add_argument("--only", default=",".join(GRID), help="Grid points to build and measure, e.g. A,B.")
    parser.add_argument("--held-out", help="Grid point whose held-out numbers to report next to the reference's.")
    args = parser.parse_args()
    out = Path(args.out)
    previous = Path(args.previous).expanduser() if args.previous else out / "previous"
    rows = validation_rows(args.per_size)
    if not args.previous:
        build(previous, PREVIOUS)
    reference = headline(measure(previous, rows, out / "previous-validation.json"))
    print(f"previous ({PREVIOUS.puzzles_per_size * 2} examples): " + fmt(reference), flush=True)
    for name in args.only.split(","):
        timing = build(out / name, GRID[name])
        numbers = headline(measure(out / name, rows, out / name / "validation.json"))
        verdict = failures(numbers, reference) or ["passes"]
        per_example = timing["seconds"] / timing["examples"]
        print(f"{name} ({timing['examples']} examples, lr {GRID[name].learning_rate:g}, batch {GRID[name].batch_size}, "
              f"{timing['steps']} steps, SFT {timing['seconds']:.0f} s = {per_example:.3f} s per example): "
              f"{fmt(numbers)} -> {'; '.join(verdict)}", flush=True)  # fmt: skip
    if args.held_out:
        chosen = held_out(out / f"held-out-{args.held_out}", str(out / args.held_out))
        before = held_out(out / "held-out-previous", str(previous))
        for label, numbers in [("previous", before), (args.held_out, chosen)]:
            print(f"held-out {label}: {fmt({k: v for k, v in numbers.items() if k != 'guess share'})}")


def fmt(numbers: dict) -> str:
    """Return the numbers as one line."""
    return ", ".join(f"{key} {value:.1f}" for key, value in numbers.items())


if __name__ == "__main__":
    main()
