"""The command line of a `lopti` command: transformers' `HfArgumentParser` over its settings dataclasses.

HfArgumentParser makes one --flag per field (also spelt with dashes, and `--no_FLAG` for a switch that defaults to
true), prints each field's help and default, and keeps argparse's handling of flags. What lopti's commands rely on
and it lacks is added by `SettingsParser`; tests/commands/test_library_parser_gaps.py shows each gap:
- values are read as a settings file reads them and checked (`lopti.commands.fields`): "1e-4", "a,b" lists, null
  for an optional field, finite numbers only, the fields' `BOUNDS`;
- only the settings given come back, so that a YAML file's value stands unless a flag changes it (precedence: the
  field's default, then the file, then the command line) and one file can be split across the command's
  dataclasses, which may share keys (`TaskData`'s);
- a mistake is one line naming the source, the key and the value, not argparse's usage block, and an unknown key
  comes with the closest valid names.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml
from transformers import HfArgumentParser

from lopti.commands.fields import (
    check_keys,
    check_values,
    field_names,
    field_types,
    is_sequence,
    parse_value,
    read_yaml,
    settings_fields,
)
from lopti.errors import UserError

NOT_GIVEN = object()  # a field's value in the namespace until its flag is given


def command_line_value(text: str) -> Any:
    """Return a flag's value as a settings file reads it (`parse_value`); refuse an empty one, which a file would
    read as null (the setting's default) but on a command line is more often a shell variable left unset."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty value; give one (null for the setting's default, where it has one)")
    return parse_value(text)


class SettingsParser(HfArgumentParser):
    """HfArgumentParser whose values are read as a settings file's are, whose result is the settings given (checked
    with the file's by the command), and whose mistakes are one line."""

    def __init__(self, dataclass_types: Sequence[type], **kwargs: Any) -> None:
        # "resolve": a key two dataclasses share (data_seed) is one flag, and its value goes to both
        super().__init__(dataclass_types, allow_abbrev=False, conflict_handler="resolve", **kwargs)
        self.hints: dict[str, Any] = {}  # each key's type; a shared key's is the last dataclass's, as its flag
        for schema in self.dataclass_types:
            self.hints |= {name: field_types(schema)[name] for name in field_names(schema)}
        for action in self._actions:  # argparse's flags: HfArgumentParser leaves no other way to them
            if action.dest not in self.hints:  # --help, --config
                continue
            action.help = (action.help or "").replace("%", "%%")  # argparse formats the help with %
            if action.nargs == 0:  # a --no_FLAG switch
                continue
            action.type = command_line_value  # checked with the settings file's values (`check_values`)
            if is_sequence(self.hints[action.dest]):
                action.nargs = None  # one word, "a,b" or "[a, b]", as a settings file writes it
            if action.required:  # a --config file may give it: checked once both are read (`make_settings`)
                action.required, action.default = False, argparse.SUPPRESS
                action.help = f"{action.help} (required)"
        # --help: each class's own settings before those it inherits (LoptiGRPOConfig's before TRL's ~200)
        own = set().union(*(inspect.get_annotations(schema) for schema in self.dataclass_types))
        for group in self._action_groups:
            group._group_actions.sort(key=lambda action: action.dest not in own)

    def given(self, words: list[str]) -> tuple[dict[str, Any], argparse.Namespace]:
        """Return the settings given in `words`, read and checked, and the command's other options (--config ...)."""
        namespace = argparse.Namespace(**dict.fromkeys(self.hints, NOT_GIVEN))
        namespace, extra = self.parse_known_args(words, namespace)
        if extra:
            reject_unknown(extra, self.hints)
        values = vars(namespace)
        settings = {key: value for key in self.hints if (value := values.pop(key)) is not NOT_GIVEN}
        return settings, namespace

    def error(self, message: str) -> NoReturn:
        """Raise argparse's complaint as one line that names the key (argparse prints its usage, then exits)."""
        flag = re.match(r"argument --([\w-]+)[^:]*: (.*)", message)
        if flag:
            key, said = flag[1].replace("-", "_"), flag[2]
            choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", said)
            if choice:
                said = f"{key} must be one of {choice[2]}, got {choice[1]}"
            message = said if said.startswith(key) else f"{key}: {said}"
        raise UserError(f"command line: {message}")


def _without_default(item: dataclasses.Field) -> bool:
    return item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Return the mapping in a YAML config file, with errors naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"config file {path} is a folder; give the YAML file in it")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not a text file (byte {error.object[error.start]:#04x} at {error.start})") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    if data is None:
        raise UserError(f"{path}: the file is empty; a recipe names at least the model and the trainer settings")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def reject_unknown(words: list[str], known: Iterable[str]) -> NoReturn:
    """Raise a ValueError for command-line words that a command does not take: each unknown --key with the
    closest known ones, else the first stray word."""
    keys = [word[2:].partition("=")[0].replace("-", "_") for word in words if word.startswith("--")]
    check_keys(keys, set(known), "command line")
    raise UserError(f"command line: unexpected {words[0]!r}; settings are given as --key value")


def make_settings(schema: type, given: dict[str, Any], from_file: dict[str, Any] | None = None) -> Any:
    """Return the dataclass `schema` from its field defaults, then `from_file`, then the command line's `given`
    (the fields of `schema` among them, checked; `from_file` is checked where it is read)."""
    values = {**(from_file or {}), **check_values(given, schema, "command line")}
    missing = [
        f"--{item.name}" for item in settings_fields(schema) if _without_default(item) and item.name not in values
    ]
    if missing:
        raise UserError(f"command line: {', '.join(missing)} is required")
    return schema(**values)
