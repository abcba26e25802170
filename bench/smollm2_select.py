"""Choose the task form SmolLM2-135M-Instruct starts RL from: prompt template and math levels, on a validation split,
by the rule fixed before any result (docs/results.md, "SmolLM2-135M on generated math").

Candidates: the math templates `chat` and `chat-example` (lopti/tasks/math/prompts.py), each on level 1, level 2
and both (the mix's numbers are the mean of the two levels', which have the same number of problems). Each level's
validation split is VALIDATION_PROBLEMS problems of the training share of problem texts, drawn with their own seed
and none of them in the recipe's training set. The untrained model answers each problem greedily and SAMPLES times
at the recipe's rollout settings (T = 0.7, top-p 1, up to 128 new tokens), judged as `lopti eval` judges them (the
last \\boxed{} against the answer, math-verify; a completion cut at the budget is wrong).

A candidate is eligible if its sampled accuracy (avg@8) is in [10, 50]% (RL's signal: groups with some right and
some wrong answers) and at most MAX_CUT of its samples run into the budget. Among eligible candidates the one with
the largest pass@8 − avg@8 wins (what sampling already finds and RL can make likely); within TIE points, the one
with the shorter mean completion (a faster rollout). The held-out set is used only by the chosen form's runs.

Run (about 30 minutes on 2 cores; the measured table is kept in --out, a rerun prints it):
  OMP_NUM_THREADS=2 python bench/smollm2_select.py --out results/smollm2-select
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lopti.cpu.packing import fast_generation
from lopti.evaluation.scoring import judge_rows, summarise
from lopti.files import write_atomic
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.math.data import math_records
from lopti.tasks.math.generate import generate_problems
from lopti.tasks.math.prompts import render_prompt
from lopti.tasks.math.task import math_judge

TEMPLATES = ("chat", "chat-example")
LEVELS = (1, 2)
VALIDATION_PROBLEMS, VALIDATION_SEED = 64, "smollm2-validation"
TRAINING = dict(train=2000, seed=0)  # the recipe's training problems per level, kept out of the validation split
SAMPLES, TEMPERATURE, BUDGET = 8, 0.7, 128
MEASURES = ("greedy", "avg@8", "pass@8", "cut", "length")
LOW, HIGH, MAX_CUT, TIE = 10.0, 50.0, 20.0, 3.0  # % avg@8; % of samples cut; points of pass@8 − avg@8


def validation_rows(level: int, template: str, count: int | None = None) -> list[dict]:
    """Return `count` (default VALIDATION_PROBLEMS) training-share problems of `level` that the recipe's training
    set does not hold (the same first ones for any count)."""
    count = count or VALIDATION_PROBLEMS
    training = {r["problem"] for r in math_records(str(level), test=0, **TRAINING)["train"]}
    drawn = generate_problems(4 * count, level, VALIDATION_SEED, test=False)
    fresh = [p for p in drawn if p.text not in training][:count]
    if len(fresh) < count:
        raise SystemExit(f"only {len(fresh)} fresh level-{level} problems")
    return [
        {"id": f"val-l{level}-{i}", "level": level, "answer": p.answer_latex, "prompt": render_prompt(p.text, template)}
        for i, p in enumerate(fresh)
    ]


def measure(model, tokenizer, level: int, template: str) -> dict:
    """Return greedy and sampled accuracy, pass@8, cut share and mean length of the untrained model on one split."""
    rows, started = validation_rows(level, template), time.time()
    decode = dict(judge=math_judge, group="level", max_new_tokens=BUDGET, batch_size=64)
    with fast_generation(model):
        greedy = judge_rows(model, tokenizer, rows, **decode)
        sampled = judge_rows(model, tokenizer, rows, samples=SAMPLES, temperature=TEMPERATURE, **decode)
    lengths = [n for record in sampled for n in record["length"]]
    summary = summarise(sampled, "level", SAMPLES, TEMPERATURE)["overall"]
    return {
        "greedy": 100 * summarise(greedy, "level", 1, 0.0)["overall"]["accuracy"],
        "avg@8": 100 * summary["accuracy"],
        "pass@8": 100 * summary[f"pass@{SAMPLES}"],
        "cut": 100 * sum(n >= BUDGET for n in lengths) / len(lengths),
        "length": summary["length"],
        "seconds": time.time() - started,
    }


def candidates(measured: dict[str, dict]) -> list[dict]:
    """Return one row per (template, levels) candidate, the two-level mix as the mean of its levels."""
    rows = []
    for template in TEMPLATES:
        for levels in ("1", "2", "1-2"):
            parts = [measured[f"{template}|{level}"] for level in ((1, 2) if levels == "1-2" else (int(levels),))]
            mean = {key: sum(p[key] for p in parts) / len(parts) for key in MEASURES}
            eligible = LOW <= mean["avg@8"] <= HIGH and mean["cut"] <= MAX_CUT
            rows.append({"template": template, "levels": levels, **mean, "eligible": eligible})
    return rows


def choose(rows: list[dict]) -> dict | None:
    """Return the rule's choice among the candidate rows, or None when none is eligible."""
    eligible = [r for r in rows if r["eligible"]]
    if not eligible:
        return None
    best = max(r["pass@8"] - r["avg@8"] for r in eligible)
    return min((r for r in eligible if r["pass@8"] - r["avg@8"] >= best - TIE), key=lambda r: r["length"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/smollm2-select"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "measured.json"
    measured = json.loads(path.read_text()) if path.is_file() else {}
    model = tokenizer = None
    for template in TEMPLATES:
        for level in LEVELS:
            key = f"{template}|{level}"
            if key in measured:
                continue
            if model is None:
                folder = resolve_model("smollm2-135m")
                model, tokenizer = load_model(folder), load_tokenizer(folder)
            measured[key] = measure(model, tokenizer, level, template)
            write_atomic(path, json.dumps(measured, indent=1))
            print(key, {k: round(v, 1) for k, v in measured[key].items()}, flush=True)
    rows = candidates(measured)
    print("| template | levels | greedy | avg@8 | pass@8 | pass@8 − avg@8 | cut | mean tokens | eligible |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['template']} | {r['levels']} | {r['greedy']:.1f}% | {r['avg@8']:.1f}% | {r['pass@8']:.1f}% | "
            f"{r['pass@8'] - r['avg@8']:+.1f} | {r['cut']:.1f}% | {r['length']:.0f} | "
            f"{'yes' if r['eligible'] else 'no'} |"
        )
    chosen = choose(rows)
    print("chosen:", f"{chosen['template']}, levels {chosen['levels']}" if chosen else "none eligible")


if __name__ == "__main__":
    main()
