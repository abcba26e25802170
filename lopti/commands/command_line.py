"""The command line and YAML files of any settings dataclass: one --flag per field, with its help and default.

A command lists its settings as `Section`s (a dataclass, or some of its fields, under one heading of its
--help). `add_settings` gives each field a flag, `given_settings` reads back the ones given, and
`lopti.commands.fields` checks them; so a new field is a new flag and YAML key without touching the
command line. Precedence: the field's default, then the YAML file, then the command line.

Why not transformers' `HfArgumentParser` / TRL's `TrlParser`, which also turn dataclasses into flags, `--help`
and YAML: they build each dataclass from the YAML values as parsed, without type or bound checks (to PyYAML
`1e-4` is a string), refuse unknown keys without naming the closest ones, report a bad flag as
argparse's usage block rather than one line naming the key, the value and the source (file or command line), and
build one parser per dataclass, where lopti's commands share `TaskData` keys and split one YAML file between
`RunConfig` and `LoptiGRPOConfig`; and they hand every key of a field's metadata to argparse, where lopti keeps
its bounds. tests/commands/test_library_parser_gaps.py shows each of these and fails when a release closes one.
lopti's checks (`lopti.commands.fields`) are those parts; the flags themselves are plain argparse, as in
HfArgumentParser, including `--flag` alone for true.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from lopti.commands.fields import (
    check_keys,
    check_values,
    field_default,
    field_types,
    parse_value,
    read_yaml,
    settings_fields,
    shown_value,
    takes_bool,
    type_word,
)
from lopti.errors import UserError

FLAG = "setting:"  # prefix of the settings' attributes in an argparse namespace, apart from its own


@dataclass(frozen=True)
class Section:
    """Fields of a settings dataclass that one of its classes declares: one heading of a command's --help."""

    title: str
    description: str
    schema: type
    names: tuple[str, ...]

    def fields(self) -> list[dataclasses.Field]:
        """Return the section's fields, in the order of `names`, with the defaults that `schema` gives them."""
        fields = {item.name: item for item in settings_fields(self.schema)}
        return [fields[name] for name in self.names if name in fields]


def declared_in(cls: type) -> tuple[str, ...]:
    """Return the fields that the dataclass `cls` declares itself (not those it inherits unchanged), in order."""
    return tuple(name for name in vars(cls).get("__annotations__", {}) if name in cls.__dataclass_fields__)


def sections_of(*schemas: type) -> tuple[Section, ...]:
    """Return the sections of the dataclasses `schemas`: for each, its own fields first, then each base class's
    (RunConfig, then TaskData; LoptiGRPOConfig, then TRL's GRPOConfig, then transformers' TrainingArguments)."""
    sections = []
    for schema in schemas:
        for cls in schema.__mro__:
            names = declared_in(cls) if dataclasses.is_dataclass(cls) else ()
            if names:
                summary = (cls.__doc__ or "").strip().split("\n")[0]
                sections.append(Section(f"{cls.__name__} ({cls.__module__.split('.')[0]})", summary, schema, names))
    return tuple(sections)


def section_keys(sections: Iterable[Section]) -> set[str]:
    """Return every key the sections take."""
    return {item.name for section in sections for item in section.fields()}


def add_settings(parser: argparse.ArgumentParser, sections: Iterable[Section]) -> None:
    """Give `parser` a --<field> flag per field of `sections`, grouped by section, with its help and default.

    A field listed by two sections appears once, under the first. A field without a default is required;
    `--flag` alone means true for fields that take true/false. Values stay text here (`given_settings`).
    """
    seen, required = set(), []
    for section in sections:
        group = parser.add_argument_group(section.title, section.description)
        hints = field_types(section.schema)
        for item in section.fields():
            if item.name in seen:
                continue
            seen.add(item.name)
            default, metavar = field_default(item), type_word(hints[item.name])
            if default is dataclasses.MISSING:
                required.append(f"--{item.name} {metavar} ")
            shown = "required" if default is dataclasses.MISSING else f"default: {shown_value(default)}"
            group.add_argument(
                f"--{item.name}",
                dest=FLAG + item.name,
                default=argparse.SUPPRESS,  # absent from the namespace unless given: the file's value stands
                required=default is dataclasses.MISSING,
                metavar=metavar,
                help=f"{item.metadata.get('help', '')} ({shown})".replace("%", "%%"),  # argparse formats with %
                **(dict(nargs="?", const="true") if takes_bool(hints[item.name]) else {}),
            )
    if seen:  # argparse's own usage line would list every flag
        parser.usage = f"%(prog)s [-h] {''.join(required)}[--KEY VALUE ...]"


def given_settings(namespace: argparse.Namespace) -> dict[str, Any]:
    """Return the settings given on the command line, each read as YAML reads a value (checked later)."""
    return {name[len(FLAG) :]: parse_value(text) for name, text in vars(namespace).items() if name.startswith(FLAG)}


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


def underscored(word: str) -> str:
    """Return a command-line word with the dashes of a --flag's name as underscores (--learning-rate 1e-5)."""
    if not word.startswith("--"):
        return word
    name, equals, value = word[2:].partition("=")
    return f"--{name.replace('-', '_')}{equals}{value}"


def reject_unknown(words: list[str], known: Iterable[str]) -> NoReturn:
    """Raise a ValueError for command-line words that a command does not take: each unknown --key with the
    closest known ones, else the first stray word."""
    check_keys([word[2:].partition("=")[0] for word in words if word.startswith("--")], set(known), "command line")
    raise UserError(f"command line: unexpected {words[0]!r}; settings are given as --key value")


def make_settings(schema: type, given: dict[str, Any], from_file: dict[str, Any] | None = None) -> Any:
    """Return the dataclass `schema` from its field defaults, then `from_file`, then the command line's `given`
    (the fields of `schema` among them, checked; `from_file` is checked where it is read)."""
    return schema(**{**(from_file or {}), **check_values(given, schema, "command line")})
