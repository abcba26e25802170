"""What RL changes in a tiny K&K recipe, on its held-out set: how often the model opens an assume-and-check trace,
and how often it is right with the trace forced, with an immediate answer forced, and left to itself, greedy and
at T = 1.

The tiny recipes' warm starts choose at their first completion token between answering at once ("</think>") and
reasoning first ("\\n"). Run on the warm start and on a trained run's final weights, this separates a gain from
better reasoning (the forced-trace accuracy rises) from a gain from choosing the trace more often (the trace rate
rises, the forced accuracies do not). The warm start with a forced trace is the baseline RL has to beat.

Run (a few minutes on one core per model), then the table of a folder's results (results.md there):
  OMP_NUM_THREADS=1 python bench/kk_decomposition.py --config configs/kk-tiny-cpu.yaml --out warm.json
  OMP_NUM_THREADS=1 python bench/kk_decomposition.py --config configs/kk-tiny-cpu.yaml --model RUN/final --out rl.json
  python bench/kk_decomposition.py --table FOLDER
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from warm_start_probe import started_accuracy

from lopti.commands.settings import resolve, split
from lopti.commands.train_run import task_datasets
from lopti.evaluation.generation import prompt_text
from lopti.files import write_atomic
from lopti.models.loading import resolve_model
from lopti.tasks.registry import get_task


def decomposition(model, tokenizer, rows: list[dict], samples: int) -> dict[str, float]:
    """Return the trace rate (greedy choice, and mean probability at T = 1) and the accuracies of each start."""
    trace, answer = tokenizer("\n")["input_ids"][0], tokenizer.convert_tokens_to_ids("</think>")
    batch = tokenizer([row["prompt"] for row in rows], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        first = model(**batch).logits[:, -1].softmax(-1)
    result = {
        "trace_rate_greedy": (first[:, trace] > first[:, answer]).float().mean().item(),
        "trace_probability": first[:, trace].mean().item(),
    }
    for name, start in (("unforced", ""), ("forced_trace", "\n"), ("forced_answer", "</think>")):
        result[f"{name}_greedy"] = started_accuracy(model, tokenizer, rows, start, 0.0, 1)
        result[f"{name}_t1"] = started_accuracy(model, tokenizer, rows, start, 1.0, samples)
    return result


COLUMNS = {
    "trace_rate_greedy": "trace chosen (greedy)", "trace_probability": "P(trace) at T = 1",
    "unforced_greedy": "accuracy greedy", "unforced_t1": "accuracy T = 1",
    "forced_trace_greedy": "forced trace, greedy", "forced_trace_t1": "forced trace, T = 1",
    "forced_answer_greedy": "forced answer, greedy", "forced_answer_t1": "forced answer, T = 1",
}  # fmt: skip


def table(results: dict[str, dict]) -> str:
    """Return the markdown table of decompositions (name → `decomposition` result), in %."""
    lines = ["| model | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, result in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * result[key]:.1f}" for key in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, help="write the table of the JSON results in this folder, then stop")
    parser.add_argument("--config", help="the tiny K&K recipe whose held-out set is used")
    parser.add_argument("--model", help="a model folder (default: the recipe's warm start)")
    parser.add_argument("--puzzles", type=int, default=300, help="the first this many held-out puzzles")
    parser.add_argument("--samples", type=int, default=2, help="samples per puzzle at T = 1")
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    args = parser.parse_args()
    if args.table:
        results = {path.stem: json.loads(path.read_text()) for path in sorted(args.table.glob("*.json"))}
        write_atomic(args.table / "results.md", table(results))
        print(table(results))
        return
    if args.out is None or args.config is None:
        parser.error("give --config and --out (a model's decomposition), or --table (the table of a folder)")
    torch.set_num_threads(1)
    run, _ = split(resolve(args.config, {"output_dir": "/tmp/lopti-bench/kk-decomposition"}))
    folder = args.model or resolve_model(run.model)
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    rows = [
        {**row, "prompt": prompt_text(row["prompt"], tokenizer)}
        for row in list(task_datasets(get_task(run.task), run)[1])
    ]
    result = {"config": args.config, "model": str(folder), "puzzles": args.puzzles, "samples": args.samples}
    result |= decomposition(model, tokenizer, rows[: args.puzzles], args.samples)
    write_atomic(args.out, json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
