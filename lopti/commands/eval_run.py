"""`lopti eval`: evaluate a model on a task's held-out set, resumably, into a results folder.

The folder holds settings.json (what was evaluated), records.jsonl (one line per finished prompt, appended
chunk by chunk, so an interrupted evaluation continues where it stopped), eval.json (all metrics) and
eval.md (the table). A folder left by different settings is refused, never overwritten, and a folder
another `lopti eval` is writing is refused too (`folder_lock`).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from lopti.commands.lengths import check_lengths
from lopti.cpu import model_decoding, native_bf16
from lopti.errors import check_number, check_output_folder
from lopti.evaluation.generation import is_vllm, load_vllm
from lopti.evaluation.scoring import judge_rows, summarise
from lopti.files import check_folder, claim_folder, folder_lock, write_atomic
from lopti.models.loading import MODEL_HELP, load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import TASKS, TaskSettings, get_task

# the data settings that choose the training prompts alone: the held-out set is the same whatever their values
TRAINING_ONLY = frozenset(key for task in TASKS.values() for key in task.data.training_only)


@dataclass(kw_only=True)
class EvalConfig(TaskSettings):
    """What to evaluate and how to decode; the held-out set is the task data's, built as `lopti train` builds it.

    `RUN_KEYS`: the settings --config takes from a run's own (a recipe or config.yaml).
    """

    model: str = field(metadata={"help": MODEL_HELP})
    samples: int = field(default=1, metadata={"help": "Samples per prompt (avg@k, pass@k)."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy."})
    eval_max_new_tokens: int = field(
        default=512,
        metadata={
            "help": "Answer budget in tokens, as lopti train's held-out evaluation names it (--config takes the "
            "run's); the training rollouts' budget is max_completion_length, a setting of its own.",
        },
    )
    batch_size: int = field(default=64, metadata={"help": "Prompts per generate call."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    reward_errors: Literal["stop", "skip"] = field(
        default="stop",
        metadata={
            "help": "A judge that raises on an answer: stop with one line naming it, the error and the answer; or "
            "skip: score that answer as wrong and count it (judge_errors). --config takes the run's.",
        },
    )
    reward_timeout: float = field(
        default=0.0,
        metadata={
            "help": "Seconds the judge may take on one answer before the evaluation stops with one line; 0: no "
            "limit. --config takes the run's.",
        },
    )
    backend: Literal["auto", "hf"] = field(
        default="auto",
        metadata={
            "help": "auto: vLLM when it is installed and a GPU is present, else lopti train's held-out decoding on the "
            "CPU (ended answers leave the batch, a prompt prefix all rows share computed once; on bf16 weights under "
            "bf16) where it applies, else 🤗 generate; hf: 🤗 generate on the model as loaded.",
        },
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "With backend auto on the CPU: decode on a bf16 copy of the weights, as lopti train evaluates "
            "under its bf16; null: where the CPU multiplies bf16 natively, as lopti train chooses. --config takes the "
            "run's.",
        },
    )

    RUN_KEYS: ClassVar[dict[str, str]] = {
        "reward_errors": "reward_errors",
        "reward_timeout": "reward_timeout",
        "bf16": "bf16",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("samples", self.samples, low=1)
        check_number("temperature", self.temperature, low=0)
        check_number("eval_max_new_tokens", self.eval_max_new_tokens, low=1)
        check_number("batch_size", self.batch_size, low=1)
        check_number("seed", self.seed, low=0)
        check_number("reward_timeout", self.reward_timeout, low=0)
        if self.samples > 1 and self.temperature <= 0:
            raise ValueError(f"samples={self.samples} needs a temperature above 0 (greedy samples are all equal)")


def default_folder(config: EvalConfig) -> Path:
    """Return where an evaluation goes when no --out is given."""
    return Path("evals") / f"{Path(config.model).name}-{config.task}-{config.samples}x-T{config.temperature:g}"


def held_out_rows(config: EvalConfig) -> list[dict[str, Any]]:
    """Return the held-out rows of the task, exactly as `lopti train` builds its evaluation set.

    That is the task's second split of the same task data. Each split has its own random stream, so no
    training prompt needs generating (`TaskData.held_out_only`).
    """
    return get_task(config.task).rows(config.task_data().held_out_only())[1]


def identity(config: EvalConfig) -> dict[str, Any]:
    """Return the settings that an evaluation's records depend on (all but those of the training split)."""
    return {key: value for key, value in asdict(config).items() if key not in TRAINING_ONLY}


def eval_markdown(result: dict[str, Any], config: EvalConfig) -> str:
    """Return the results as markdown tables: one line per group and one for all, then one table per key of the
    task's breakdown. Accuracy comes with its 95% interval over the prompts."""
    greedy = config.samples == 1 and config.temperature == 0
    decoding = "greedy" if greedy else f"{config.samples} samples at T={config.temperature}"
    pass_keys = [k for k in result["overall"] if k.startswith("pass@")]
    lines = [f"# {config.task} evaluation of {config.model}", "", f"Decoding: {decoding}, at most "
             f"{config.eval_max_new_tokens} new tokens. Intervals: 95%, normal, over the prompts."]  # fmt: skip
    tables = {result["group"]: [*result["per_group"].items(), ("all", result["overall"])]}
    tables |= {key: list(values.items()) for key, values in result.get("breakdown", {}).items()}
    for key, rows in tables.items():
        lines += ["", f"| {key} | prompts | accuracy (avg@{config.samples}) | " + " | ".join(pass_keys)
                  + " | format errors | mean length |", "|---" * (5 + len(pass_keys)) + "|"]  # fmt: skip
        for name, stats in rows:
            passes = " | ".join(f"{100 * stats[k]:.1f}%" for k in pass_keys)
            low, high = stats.get("accuracy_interval") or (stats["accuracy"], stats["accuracy"])
            lines.append(
                f"| {name} | {stats['n']} | {100 * stats['accuracy']:.1f}% [{100 * low:.1f}, {100 * high:.1f}] | "
                f"{passes} | {100 * stats['format_error']:.1f}% | {stats['length']:.1f} |"
            )
    if result.get("judge_errors"):  # an eval.json from before the count has none
        lines += [
            "",
            f"{result['judge_errors']} answer(s) the judge raised on are scored as wrong (reward_errors: skip).",
        ]
    return "\n".join(lines) + "\n"


def _stored_settings(stored: dict[str, Any]) -> dict[str, Any]:
    """Return a settings.json record under the current keys (`n` is eval_puzzles, `max_new_tokens`
    eval_max_new_tokens): a key the record lacks did not exist when it was written, so it holds that key's default."""
    renamed = {"n": "eval_puzzles", "max_new_tokens": "eval_max_new_tokens"}
    defaults = {
        item.name: item.default
        for item in fields(EvalConfig)
        if item.default is not MISSING and item.name not in TRAINING_ONLY
    }
    return {**defaults, **{renamed.get(key, key): value for key, value in stored.items()}}


def _check_folder(out: Path, config: EvalConfig, claim: bool = False) -> None:
    """Raise a UserError if `out` holds an evaluation of other settings, or anything else; with `claim`, write
    its settings.json."""
    guard = claim_folder if claim else check_folder
    guard(out, "settings.json", identity(config), "an evaluation", normalise=_stored_settings)


def _claim_folder(out: Path, config: EvalConfig) -> list[dict[str, Any]]:
    """Return the records already in `out` (none for a new folder); refuse a folder of other settings."""
    records_path = out / "records.jsonl"
    _check_folder(out, config, claim=True)
    if not records_path.exists():
        return []
    records = []
    for line in records_path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by an interruption: that chunk is redone
    records_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def run_eval(config: EvalConfig, out: str | Path, chunk: int = 256) -> dict[str, Any]:
    """Evaluate (continuing a previous run in `out`), write eval.json and eval.md, return the metrics."""
    out = check_output_folder(out, "--out")
    if config.bf16 is None:  # chosen before the folder records the settings: its records say how they were decoded
        config = replace(config, bf16=native_bf16())
    _check_folder(out, config)
    task = get_task(config.task)
    rows = held_out_rows(config)  # checks the task data before any model is loaded
    model_path = resolve_model(config.model)
    tokenizer = load_tokenizer(model_path)
    check_lengths(
        config.model,
        model_path,
        tokenizer,
        [row["prompt"] for row in rows],
        {"eval_max_new_tokens": config.eval_max_new_tokens},
    )
    out = Path(out)
    with folder_lock(out):  # a second evaluation into `out` would append the same records twice
        records = _claim_folder(out, config)
        done = {r["id"] for r in records}
        todo = [(index, r) for index, r in enumerate(rows) if r["id"] not in done]
        if todo:
            model = (load_vllm(model_path, config.seed) if config.backend != "hf" else None) or load_model(model_path)
            lopti_decoding = config.backend == "auto" and not is_vllm(model)
            from tqdm.auto import tqdm

            with (
                model_decoding(model, config.bf16) if lopti_decoding else nullcontext(),
                (out / "records.jsonl").open("a") as handle,
                tqdm(total=len(rows), initial=len(done), desc="eval") as bar,
            ):
                for start in range(0, len(todo), chunk):
                    part = todo[start : start + chunk]
                    new = judge_rows(
                        model,
                        tokenizer,
                        [row for _, row in part],
                        task.judge,
                        task.group,
                        config.samples,
                        config.temperature,
                        config.eval_max_new_tokens,
                        config.batch_size,
                        config.seed + part[0][0],  # seeded by position, so a resumed run samples the same
                        breakdown=task.breakdown,
                        reward_errors=config.reward_errors,
                        reward_timeout=config.reward_timeout,
                    )
                    handle.write("".join(json.dumps(r) + "\n" for r in new))
                    handle.flush()
                    records += new
                    bar.update(len(part))
        result = summarise(records, task.group, config.samples, config.temperature)
        write_atomic(out / "eval.json", json.dumps(result, indent=1))
        write_atomic(out / "eval.md", eval_markdown(result, config))
        return result
