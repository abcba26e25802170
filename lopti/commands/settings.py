"""Run settings for `lopti train`: a YAML file plus `--key value` overrides, TRL-style.

Every key is either a `RunConfig` field (what to train on) or a `LoptiGRPOConfig` field (how to
train). Unknown keys are rejected with the closest valid names, before any compute is spent.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from lopti.errors import check_output_folder
from lopti.tasks.registry import TaskData
from lopti.train.config import LoptiGRPOConfig


@dataclass
class RunConfig(TaskData):
    """What to train: model, task data (`TaskData`), rewards, LoRA, resume and the held-out evaluation."""

    model: str = field(
        default="tiny", metadata={"help": "Embedded model name (tiny, smollm2-135m), 🤗 folder or hub id."}
    )
    rewards: list[str] = field(
        default_factory=lambda: ["logic_rl"],
        metadata={
            "help": "Reward functions (kk: logic_rl, strict, partial, lenient, accuracy; math: math, math_format)."
        },
    )
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 trains all weights (LoRA needs peft).", "min": 0})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling α.", "min": 1})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "LoRA target modules."})
    resume: bool = field(default=False, metadata={"help": "Continue from the last complete checkpoint."})
    evaluate: bool = field(
        default=False,
        metadata={"help": "Greedy held-out evaluation before and after training, written to report.md."},
    )
    eval_max_new_tokens: int = field(default=64, metadata={"help": "Token budget of each evaluation answer.", "min": 1})
    eval_samples: int = field(
        default=0,
        metadata={
            "help": "With evaluate: also this many samples per prompt (avg@k, pass@k); 0 = greedy only.",
            "min": 0,
        },
    )
    eval_temperature: float = field(
        default=1.0, metadata={"help": "Temperature of the sampled evaluation.", "above": 0}
    )


RUN_KEYS = {f.name for f in dataclasses.fields(RunConfig)}
TRAINER_KEYS = {f.name for f in dataclasses.fields(LoptiGRPOConfig) if f.init}
# Bounds of TRL / transformers fields (ours carry theirs in the field metadata): out of them, these failed late
# (a traceback once the model was built) or silently (a run that trains nothing). "or": allowed sentinels.
TRAINER_BOUNDS: dict[str, dict[str, Any]] = {
    "learning_rate": {"min": 0},
    "num_generations": {"min": 2},
    "per_device_train_batch_size": {"min": 1},
    "per_device_eval_batch_size": {"min": 1},
    "gradient_accumulation_steps": {"min": 1},
    "steps_per_generation": {"min": 1},
    "generation_batch_size": {"min": 1},
    "num_iterations": {"min": 1},
    "max_steps": {"min": 1, "or": (-1,)},
    "num_train_epochs": {"above": 0},
    "beta": {"min": 0},
    "max_completion_length": {"min": 1},
    "max_prompt_length": {"min": 1},
    "temperature": {"above": 0},
    "top_p": {"above": 0, "max": 1},
    "epsilon": {"min": 0},
    "epsilon_high": {"min": 0},
    "max_grad_norm": {"min": 0},
    "weight_decay": {"min": 0},
    "warmup_ratio": {"min": 0, "max": 1},
    "warmup_steps": {"min": 0},
    "logging_steps": {"above": 0},
    "save_steps": {"above": 0},
    "eval_steps": {"above": 0},
    "save_total_limit": {"min": 1},
    "seed": {"min": 0, "max": 2**32 - 1},  # numpy's limit
    "data_seed": {"min": 0},
}


class _Mismatch(Exception):
    """A value that does not fit a type; the argument describes what would."""


def _union_options(hint: Any) -> tuple | None:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else None


def _describe(hint: Any) -> str:
    """Return what a value of type `hint` looks like, in words."""
    options = _union_options(hint)
    if options is not None:
        return " or ".join(_describe(option) for option in options if option is not type(None))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is list or hint is list:
        plural = {str: "names", int: "whole numbers", float: "numbers"}.get(args[0] if args else None, "values")
        return f"a list of {plural} (a,b or [a, b])"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(member.value) for member in hint)
    words = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text", dict: "a mapping"}
    return words.get(origin or hint, getattr(hint, "__name__", str(hint)))


def _convert_one(value: Any, hint: Any, lenient: bool) -> Any:
    """Return `value` checked against type `hint`, converted only where it must be: `lenient` also takes ints
    for floats, numbers for text, numbers written as text (YAML reads 1e-5 as text) and lists as "a,b"."""
    origin = typing.get_origin(hint) or hint
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if number and isinstance(value, int):
            return value
        if lenient and isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
    elif hint is float:
        if number and (lenient or isinstance(value, float)) and (isinstance(value, int) or math.isfinite(value)):
            return value  # an int stands for a float (PEP 484) and stays as written
        if lenient and isinstance(value, str):
            try:
                converted = float(value)
            except ValueError:
                raise _Mismatch from None
            if math.isfinite(converted):
                return converted
    elif hint is str:
        if isinstance(value, str) or (lenient and number):
            return value  # people: 5 means "5"; its readers take both
    elif origin is list:
        items = value
        if lenient and isinstance(value, str):
            items = [parse_value(item.strip()) for item in value.split(",")]
        if isinstance(items, (list, tuple)):
            (item_hint,) = typing.get_args(hint) or (Any,)
            return [_convert(item, item_hint) for item in items]
    elif origin is dict:
        if isinstance(value, dict):
            return value
    elif origin is Literal:
        if value in typing.get_args(hint):
            return value
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint) or value in {member.value for member in hint}:
            return value
    else:
        return value  # a type this check does not know (a config object): the dataclass checks it
    raise _Mismatch


def _convert(value: Any, hint: Any) -> Any:
    """Return `value` as type `hint` (exact matches of a union's members first), or raise _Mismatch."""
    options = _union_options(hint)
    if options is None:
        return _convert_one(value, hint, lenient=True)
    if value is None and type(None) in options:
        return None
    for lenient in (False, True):
        for option in options:
            if option is not type(None):
                try:
                    return _convert_one(value, option, lenient)
                except _Mismatch:
                    pass
    raise _Mismatch


def _bounds_problem(value: Any, bounds: dict[str, Any]) -> str | None:
    """Return what `value` must be when it lies outside `bounds` ("min", "above", "max", "or"), else None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value in bounds.get("or", ()):
        return None
    low, above, high = bounds.get("min"), bounds.get("above"), bounds.get("max")
    if (low is None or value >= low) and (above is None or value > above) and (high is None or value <= high):
        return None
    limits = [f"{sign} {bounds[key]}" for key, sign in (("min", "≥"), ("above", ">"), ("max", "≤")) if key in bounds]
    sentinels = "".join(f" (or {v})" for v in bounds.get("or", ()))
    return " and ".join(limits) + sentinels


@functools.cache
def _field_types(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def check_values(
    values: dict[str, Any], schema: type, source: str, bounds: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Return the entries of `values` that are fields of the dataclass `schema`, converted to the fields' types.

    Raises a ValueError naming `source`, the key and the value when a value has the wrong type ("abc" for a
    float, 1.5 for an int, "maybe" for a bool) or lies outside the field's bounds: metadata "min" / "above" /
    "max" / "or" (allowed sentinels), or `bounds[key]` for fields of classes lopti does not own. Types come
    from the annotations, so a new field is checked without touching this function.
    """
    hints = _field_types(schema)
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    checked = {}
    for key, value in values.items():
        if key not in fields:
            continue
        try:
            converted = _convert(value, hints[key])
        except _Mismatch:
            wanted = _describe(hints[key])
            if value is None:
                raise ValueError(f"{source}: {key} needs a value ({wanted})") from None
            raise ValueError(f"{source}: {key} must be {wanted}, got {value!r}") from None
        problem = _bounds_problem(converted, {**fields[key].metadata, **(bounds or {}).get(key, {})})
        if problem:
            raise ValueError(f"{source}: {key} must be {problem}, got {value!r}")
        checked[key] = converted
    return checked


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
    if path.is_dir():
        raise ValueError(f"config file {path} is a folder; give the YAML file in it")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a text file (byte {error.object[error.start]:#04x} at {error.start})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    if data is None:
        raise ValueError(f"{path}: the file is empty; a recipe names at least the model and the trainer settings")
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
        settings.update(from_file | check_run_values(from_file, str(config_file)))
    check_keys(overrides, "command line")
    settings.update(overrides | check_run_values(overrides, "command line"))
    return settings


def check_run_values(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Return `values` converted to the types of their RunConfig / LoptiGRPOConfig fields (see check_values)."""
    return check_values(values, LoptiGRPOConfig, source, TRAINER_BOUNDS) | check_values(values, RunConfig, source)


def check_settings(run: RunConfig, trainer_kwargs: dict[str, Any]) -> None:
    """Raise a ValueError for settings that are each valid but cannot work together or here, before any compute."""
    if run.evaluate and run.eval_puzzles < 1 and not run.eval_file:
        raise ValueError(f"evaluate: true needs held-out prompts, but eval_puzzles is {run.eval_puzzles}")
    if "output_dir" in trainer_kwargs:
        check_output_folder(trainer_kwargs["output_dir"], "output_dir")
    report_to = trainer_kwargs.get("report_to")
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    wanted = [name for name in wanted if name not in ("none", "all")]
    if wanted:
        from transformers.integrations import get_available_reporting_integrations
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        for name in wanted:
            if name not in INTEGRATION_TO_CALLBACK:
                raise ValueError(f"report_to {name!r} is unknown; choose from {', '.join(INTEGRATION_TO_CALLBACK)}")
            if name not in get_available_reporting_integrations():
                raise ValueError(f"report_to {name!r}: {name} is not installed (pip install {name}), or drop it")


def split(settings: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """Return the RunConfig and the keyword arguments for LoptiGRPOConfig, every value checked."""
    checked = {**settings, **check_run_values(settings, "settings")}
    run = RunConfig(**{k: v for k, v in checked.items() if k in RUN_KEYS})
    trainer_kwargs = {k: v for k, v in checked.items() if k in TRAINER_KEYS}
    check_settings(run, trainer_kwargs)
    return run, trainer_kwargs
