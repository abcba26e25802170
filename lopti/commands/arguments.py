"""The command line of a `lopti` command: TRL's `TrlParser` over the command's settings dataclasses
(`lopti.commands.settings.LoptiParser`), or transformers' `HfArgumentParser`, which TrlParser extends, for `lopti
data` (`DataParser`: the base install has no TRL).

The parser makes a --flag per field, with its help, type and default; each dataclass checks its values in
`__post_init__`. What lopti adds (`SettingsLayer`): a mistake is one line naming the key, the value
and where it came from, not argparse's usage block; an unknown key comes with the closest valid names; a settings file
is read as YAML 1.2 reads booleans (`save_strategy: no` is the text "no") and numbers (1e-5), and its values are
converted by the flags' own types; `given` returns only the settings given, so a recipe's value stands unless a flag
changes it.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import yaml
from transformers import HfArgumentParser

from lopti.errors import UserError, check_keys


class SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans (true/false only) and floats (1e-5 without a dot)."""


SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in rules if tag != "tag:yaml.org,2002:bool"]
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for tag, rule, first in (
    ("bool", "^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("float", r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$", "-+0123456789"),
):
    SettingsLoader.add_implicit_resolver(f"tag:yaml.org,2002:{tag}", re.compile(rule), list(first))


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Return the mapping in a YAML settings file, with errors naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"config file {path} is a folder; give the YAML file in it")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SettingsLoader)  # a SafeLoader: plain values
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not a text file (byte {error.object[error.start]:#04x} at {error.start})") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    if data is None:
        raise UserError(f"{path}: the file is empty; a recipe names at least the model and the trainer settings")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


TYPE_WORDS = {"int": "a whole number", "float": "a number", "string_to_bool": "true or false"}  # the flags' types


def whole_as_written(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """Return a float flag's conversion that reads "8" as 8, as written, not 8.0 (TRL types save_steps as a float, for
    a ratio below 1), so that a run's config.yaml records it as given."""

    @functools.wraps(convert)  # argparse names the type in its errors: "float"
    def converted(text: str) -> Any:
        try:
            return int(text)
        except ValueError:  # "0.25", "1e-5", "null", or a mistake the flag's own conversion words
            return convert(text)

    return converted


class SettingsLayer:
    """What lopti adds to an HfArgumentParser: mistakes in one line, settings files read as the command line is, and
    the settings given apart from the defaults. A mixin before the parser class: `class P(SettingsLayer, TrlParser)`."""

    def __init__(self, dataclass_types: Iterable[type], **kwargs: Any) -> None:
        # "resolve": a key two dataclasses share (data_seed) is one flag, and its value goes to both
        super().__init__(list(dataclass_types), allow_abbrev=False, conflict_handler="resolve", **kwargs)
        self.flags = {action.dest: action for action in self._actions if action.dest not in ("help", "config")}
        self.required = [key for key, action in self.flags.items() if action.required]
        self.source = "command line"  # what the words being parsed came from, for `error`
        for action in self.flags.values():
            action.help = (action.help or "").replace("%", "%%")  # argparse formats the help with %
            action.required = False  # a --config file may give it: `build` names what neither gave
            if getattr(action.type, "__name__", None) == "float":  # float, or transformers' wrapper of it
                action.type = whole_as_written(action.type)
        # --help: each class's own settings before those it inherits (LoptiGRPOConfig's before TRL's ~200)
        own = set().union(*(inspect.get_annotations(kind) for kind in self.dataclass_types))
        for group in self._action_groups:
            group._group_actions.sort(key=lambda action: action.dest not in own)

    def read(self, path: str | Path) -> dict[str, Any]:
        """Return the settings a YAML file gives, each converted by its flag (`typed`)."""
        values = load_yaml(path)
        return self.typed(values, str(path))

    def typed(self, values: dict[str, Any], source: str) -> dict[str, Any]:
        """Return a settings file's `values` converted by their flags, as the same values written on the command line
        would be (a list setting's items one by one), refusing unknown keys. What no flag's text can write stays as
        it is: null, a mapping, an empty list, a list for a setting of one value (`report_to: []`)."""
        check_keys(values, self.flags, source)
        words = {}
        for key, value in values.items():
            if isinstance(value, list) and value and self.flags[key].nargs in ("+", "*"):
                words[key] = [f"--{key}", *map(_text, value)]
            elif value is not None and not isinstance(value, (list, dict)):
                words[key] = [f"--{key}={_text(value)}"]
        self.source = source
        try:
            parsed = vars(self.parse_known_args([word for key in words for word in words[key]])[0])
        finally:
            self.source = "command line"
        return {key: parsed[key] if key in words else value for key, value in values.items()}

    def given(self, words: list[str]) -> tuple[dict[str, Any], argparse.Namespace]:
        """Return the settings that `words` give, converted by their flags, and the command's other options."""
        unset = object()
        namespace = argparse.Namespace(**dict.fromkeys(self.flags, unset))
        namespace, extra = self.parse_known_args(self._listed(words), namespace)
        if extra:
            keys = [word[2:].partition("=")[0].replace("-", "_") for word in extra if word.startswith("--")]
            check_keys(keys, self.flags, "command line")
            raise UserError(f"command line: unexpected {extra[0]!r}; settings are given as --key value")
        values = vars(namespace)
        settings = {key: value for key in self.flags if (value := values.pop(key)) is not unset}
        for key, value in settings.items():
            if value == "" or (isinstance(value, list) and "" in value):
                raise UserError(f"command line: {key}: empty value; give one (or leave the flag out for its default)")
        return settings, namespace

    def _listed(self, words: list[str]) -> list[str]:
        """Return `words` with each value of a list setting written "a,b" (as recorded commands write lists) split
        into the words argparse takes ("a" "b")."""
        out, listing = [], False
        for word in words:
            if word.startswith("--"):
                key, equals, value = word[2:].partition("=")
                action = self.flags.get(key.replace("-", "_"))
                listing = action is not None and action.nargs in ("+", "*")
                out += [f"--{key}", *value.split(",")] if listing and equals else [word]
                listing = listing and not equals
            else:
                out += word.split(",") if listing else [word]
        return out

    def build(self, settings: dict[str, Any]) -> tuple[Any, ...]:
        """Return the command's dataclasses made from `settings`, each field not in it at its default."""
        missing = [f"--{key}" for key in self.required if key not in settings]
        if missing:
            raise UserError(f"command line: {', '.join(missing)} is required")
        return tuple(self.parse_dict(settings, allow_extra_keys=True))

    def error(self, message: str) -> NoReturn:
        """Raise argparse's complaint as one line that names the key (argparse prints its usage, then exits)."""
        flag = re.match(r"argument --([\w-]+)[^:]*: (.*)", message)
        if flag:
            key, said = flag[1].replace("-", "_"), flag[2]
            value = re.fullmatch(r"invalid (\w+) value: (.*)|Truthy value expected: got (.*?) but .*", said)
            choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", said)
            if value:  # worded as a settings file's value is (`typed`)
                wanted = TYPE_WORDS.get(value[1] or "string_to_bool", "valid")
                said = f"{key} must be {wanted}, got {value[2] or repr(value[3])}"
            elif choice:
                said = f"{key} must be one of {choice[2]}, got {choice[1]}"
            message = said if said.startswith(key) else f"{key}: {said}"
        raise UserError(f"{self.source}: {message}")


def _text(value: Any) -> str:
    """Return a settings file's value as the command line writes it (YAML's true is "true")."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class DataParser(SettingsLayer, HfArgumentParser):
    """`lopti data`'s parser: transformers' HfArgumentParser, as the base install, which runs it, has no TRL."""
