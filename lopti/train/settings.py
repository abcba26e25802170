"""Run settings for `lopti train`: a YAML file plus `--key value` overrides, TRL-style.

Every key is either a `RunConfig` field (what to train on) or a `LoptiGRPOConfig` field (how to
train). Unknown keys are rejected with the closest valid names, before any compute is spent.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lopti.train.config import LoptiGRPOConfig


@dataclass
class RunConfig:
    """What to train: model, task data, rewards, and the run folder."""

    model: str = field(
        default="tiny", metadata={"help": "Embedded model name (tiny, smollm2-135m), 🤗 folder or hub id."}
    )
    task: str = field(default="kk", metadata={"help": "Task: 'kk' (Knights and Knaves) or 'math'."})
    rewards: list[str] = field(
        default_factory=lambda: ["logic_rl"],
        metadata={
            "help": "Reward functions (kk: logic_rl, strict, partial, lenient, accuracy; math: math, math_format)."
        },
    )
    template: str = field(default="chatml-think", metadata={"help": "Prompt template of the task."})
    people: str = field(default="3-7", metadata={"help": "K&K sizes to train on: 5, 3-7 or 2,4,6."})
    levels: str = field(default="1-3", metadata={"help": "Math: levels of the generated problems, 1-5."})
    train_file: str | None = field(
        default=None, metadata={"help": "Math: training file (JSONL/JSON/Parquet, verl or problem/answer schema)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Math: held-out file, same formats."})
    train_puzzles: int = field(default=900, metadata={"help": "Generated training prompts per K&K size / math level."})
    eval_people: str | None = field(default=None, metadata={"help": "K&K sizes to evaluate on (default: people)."})
    eval_puzzles: int = field(default=100, metadata={"help": "Generated held-out prompts per K&K size / math level."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data (train and eval)."})
    fixed_names: bool = field(
        default=False, metadata={"help": "K&K: person k always has the k-th name (for tiny models)."}
    )
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 trains all weights (LoRA needs peft)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling α."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "LoRA target modules."})
    resume: bool = field(default=False, metadata={"help": "Continue from the last complete checkpoint."})
    evaluate: bool = field(
        default=False,
        metadata={"help": "Greedy held-out evaluation before and after training, written to report.md."},
    )
    eval_max_new_tokens: int = field(default=64, metadata={"help": "Token budget of each evaluation answer."})
    eval_samples: int = field(
        default=0,
        metadata={"help": "With evaluate: also this many samples per prompt (avg@k, pass@k); 0 = greedy only."},
    )
    eval_temperature: float = field(default=1.0, metadata={"help": "Temperature of the sampled evaluation."})


RUN_KEYS = {f.name for f in dataclasses.fields(RunConfig)}
TRAINER_KEYS = {f.name for f in dataclasses.fields(LoptiGRPOConfig) if f.init}


def parse_value(text: str) -> Any:
    """Return a command-line value as YAML reads it, with "1e-5"-style floats understood."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """Return {key: value} from `--key value` / `--key=value` pairs (`--flag` alone means true)."""
    overrides: dict[str, Any] = {}
    index = 0
    while index < len(args):
        token = args[index]
        if not token.startswith("--"):
            raise ValueError(f"expected --key value, got {token!r}")
        key, has_value, value = token[2:].partition("=")
        key = key.replace("-", "_")
        if not has_value:
            follows = index + 1 < len(args) and not args[index + 1].startswith("--")
            value = args[index + 1] if follows else "true"
            index += 1 if follows else 0
        overrides[key] = parse_value(value)
        index += 1
    return overrides


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Return the mapping in a YAML config file, with errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def check_keys(settings: dict[str, Any], source: str) -> None:
    """Raise a ValueError naming each unknown key and the closest valid ones."""
    known = RUN_KEYS | TRAINER_KEYS
    unknown = [key for key in settings if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise ValueError(f"{source}: unknown key(s) {'; '.join(hints)}")


def resolve(config_file: str | Path | None, overrides: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Return the settings: `defaults`, then the YAML file, then the command-line overrides."""
    settings = dict(defaults)
    if config_file is not None:
        from_file = load_yaml(config_file)
        check_keys(from_file, str(config_file))
        settings.update(from_file)
    check_keys(overrides, "command line")
    settings.update(overrides)
    return settings


def split(settings: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """Return the RunConfig and the keyword arguments for LoptiGRPOConfig."""
    run = RunConfig(**{k: v for k, v in settings.items() if k in RUN_KEYS})
    if isinstance(run.rewards, str):
        run.rewards = [name.strip() for name in run.rewards.split(",")]
    return run, {k: v for k, v in settings.items() if k in TRAINER_KEYS}
