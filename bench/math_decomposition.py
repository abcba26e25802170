"""What RL changes in the default recipe's answers (level-1 math): the set-up of the sum, or the arithmetic.

A level-1 problem is one addition ("gets N more") or one subtraction ("gives away N"), and SmolLM2-135M answers
it in one line ending in an equation ("... so she has 46 + 35 = 81 stickers. \\boxed{81}"). Each answer is split
into two steps: the set-up (its last equation takes the problem's two numbers with the problem's operation) and
the arithmetic (that equation's result is right). Run on the warm start and on trained runs' final weights, this
tells a policy that learned to add and subtract (arithmetic right more often) from one that changed its form or
its choice of operation, and says whether the length of the answers moved.

Run (a few minutes on 2 cores per model), then the table of a folder's results (results.md there):
  OMP_NUM_THREADS=2 python bench/math_decomposition.py --out FOLDER/warm-start.json
  OMP_NUM_THREADS=2 python bench/math_decomposition.py --model RUN/final --out FOLDER/NAME.json
  python bench/math_decomposition.py --table FOLDER
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from lopti.commands.settings import resolve, split
from lopti.commands.train_run import task_datasets
from lopti.cpu.precision import native_bf16
from lopti.evaluation.generation import generate, prompt_text
from lopti.files import write_atomic
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.completions import ended_properly, prefilled_think
from lopti.tasks.registry import get_task

DEFAULT_RECIPE = "configs/math-smollm2-ar-cpu.yaml"
HELD_OUT = {"eval_puzzles": 500, "eval_sampled_prompts": 200}  # the held-out sizes of the decomposition's records
# the last "a op b = c" of an answer; the model writes -, −, x, × and * as well as + and /
EQUATION = re.compile(r"(\d+)\s*([-+−x×*/÷])\s*(\d+)\s*=\s*(\d+)")
OPERATIONS = {"+": "+", "-": "-", "−": "-", "x": "*", "×": "*", "*": "*", "/": "/", "÷": "/"}
PROBLEM = re.compile(r"has (\d+) \w+ and (gets|gives away) (\d+)")


def problem_sum(text: str) -> tuple[int, str, int]:
    """Return (first number, operation, second number) of a level-1 problem text."""
    found = PROBLEM.search(text)
    if found is None:
        raise ValueError(f"not a level-1 problem: {text!r}")
    have, verb, change = found.groups()
    return int(have), "+" if verb == "gets" else "-", int(change)


def answer_steps(answer: str, problem: tuple[int, str, int]) -> dict[str, bool]:
    """Return whether an answer writes an equation, sets the problem's sum (`problem_sum`) up in it, and does its
    arithmetic right."""
    equations = EQUATION.findall(answer)
    if not equations:
        return {"equation": False, "set_up": False, "arithmetic": False}
    left, symbol, right, result = equations[-1]
    left, right, result, operation = int(left), int(right), int(result), OPERATIONS[symbol]
    have, wanted, change = problem
    operands = {left, right} == {have, change} if wanted == "+" else (left, right) == (have, change)
    value = {"+": left + right, "-": left - right, "*": left * right, "/": left / right if right else None}[operation]
    return {"equation": True, "set_up": operation == wanted and operands, "arithmetic": value == result}


def decomposition(model, tokenizer, rows: list[dict], samples: int, sampled_prompts: int, temperature: float) -> dict:
    """Return, greedy and sampled, the shares of answers that are right, set the sum up right, do the arithmetic
    right, and are right given a right set-up; per operation the accuracy; and the mean answer length."""
    judge = get_task("math").judge
    result: dict[str, float] = {}
    for mode, chosen, k, temp in (("greedy", rows, 1, 0.0), ("sampled", rows[:sampled_prompts], samples, temperature)):
        texts = [prompt_text(row["prompt"], tokenizer) for row in chosen]
        answers = generate(model, tokenizer, texts, k, temp, max_new_tokens=128, batch_size=256, seed=0)
        scored = []
        for row, outputs in zip(chosen, answers, strict=True):
            problem = problem_sum(row["prompt"][-1]["content"])
            for text, ids in outputs:  # judged as lopti's evaluation judges (`judge_rows`)
                ended = ended_properly(ids, tokenizer.eos_token_id, tokenizer.pad_token_id)
                correct = ended and judge(prefilled_think(row["prompt"]) + text, row)[0]
                scored.append({**answer_steps(text, problem), "correct": correct, "op": problem[1], "len": len(ids)})
        result |= {
            f"{mode}_accuracy": share(scored, "correct"),
            f"{mode}_set_up": share(scored, "set_up"),
            f"{mode}_arithmetic": share([a for a in scored if a["equation"]], "arithmetic"),
            f"{mode}_accuracy_set_up": share([a for a in scored if a["set_up"]], "correct"),
            f"{mode}_accuracy_addition": share([a for a in scored if a["op"] == "+"], "correct"),
            f"{mode}_accuracy_subtraction": share([a for a in scored if a["op"] == "-"], "correct"),
            f"{mode}_length": sum(a["len"] for a in scored) / len(scored),
        }
    return result


def share(answers: list[dict], key: str) -> float:
    """Return the share of `answers` for which `key` is true (0 for none)."""
    return sum(answer[key] for answer in answers) / max(len(answers), 1)


COLUMNS = {
    "accuracy": "accuracy", "set_up": "sum set up right", "arithmetic": "arithmetic right",
    "accuracy_set_up": "accuracy, sum set up right", "accuracy_addition": "accuracy, additions",
    "accuracy_subtraction": "accuracy, subtractions", "length": "length (tokens)",
}  # fmt: skip


def table(results: dict[str, dict]) -> str:
    """Return the markdown table of decompositions (name → `decomposition` result), shares in %."""
    lines = ["| model, decoding | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, result in results.items():
        for mode in ("greedy", "sampled"):
            cells = [
                f"{result[f'{mode}_{key}']:.1f}" if key == "length" else f"{100 * result[f'{mode}_{key}']:.1f}"
                for key in COLUMNS
            ]
            decoding = "greedy" if mode == "greedy" else f"T = {result['temperature']}"
            lines.append(f"| {name}, {decoding} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, help="write the table of the JSON results in this folder, then stop")
    parser.add_argument("--model", help="a model folder (default: the recipe's model before RL)")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the level-1 math recipe whose held-out set is used")
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    args = parser.parse_args()
    if args.table:
        paths = sorted(args.table.glob("*.json"), key=lambda path: (path.stem != "warm-start", path.stem))
        if not paths:
            parser.error(f"--table {args.table}: no decomposition (.json) in that folder")
        markdown = table({path.stem: json.loads(path.read_text()) for path in paths})
        write_atomic(args.table / "results.md", markdown)
        print(markdown)
        return
    if args.out is None:
        parser.error("give --out (a model's decomposition) or --table (the table of a folder)")
    if not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: folder {args.out.parent} does not exist")
    try:  # every input checked before the model is loaded
        run, _ = split(resolve(args.config, {"output_dir": "/tmp/lopti-bench/math-decomposition", **HELD_OUT}))
        folder = resolve_model(args.model or run.model)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    if run.task != "math" or run.levels != "1":
        parser.error(f"{args.config}: the decomposition reads level-1 math problems (task math, levels 1)")
    tokenizer = load_tokenizer(folder)
    model = load_model(folder).to(torch.bfloat16 if native_bf16() else torch.float32).eval()
    rows = list(task_datasets(get_task(run.task), run)[1])
    result = {"config": args.config, "model": str(folder), "problems": len(rows), "temperature": run.eval_temperature}
    result |= {"samples": run.eval_samples, "sampled_prompts": run.eval_sampled_prompts}
    result |= decomposition(model, tokenizer, rows, run.eval_samples, run.eval_sampled_prompts, run.eval_temperature)
    write_atomic(args.out, json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
