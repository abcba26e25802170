"""Reading and checking the values of settings dataclasses: what a value of each field looks like, and whether it fits.

A command's settings are dataclasses whose fields carry their help in the metadata and whose bounds are a class table,
`BOUNDS` (field name: "min" / "above" / "max" / "or" for numbers, "min_items" for lists, "choices" for names), merged
along the class's bases. The bounds are not in the metadata because transformers' HfArgumentParser, which makes the
flags, hands every metadata key to argparse. These functions read the annotations and the tables, so a new field is
read and checked without touching them.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import math
import re
import types
import typing
from argparse import ArgumentTypeError
from typing import Any, Literal

import yaml
from transformers.hf_argparser import string_to_bool

from lopti.errors import UserError

BOOL_TAG = "tag:yaml.org,2002:bool"


class SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with only true and false read as booleans, as in YAML 1.2: `save_strategy: no`
    is the text "no" (one of TrainingArguments' save strategies), not false."""


SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SettingsLoader.add_implicit_resolver(BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def read_yaml(text: str) -> Any:
    """Return a YAML document's value as settings read it (`SettingsLoader`)."""
    return yaml.load(text, Loader=SettingsLoader)  # a SafeLoader: builds plain values only


def parse_value(text: str) -> Any:
    """Return a command-line value as a settings file reads it (`read_yaml`), with "1e-5"-style floats understood;
    text that is not valid YAML ("[a") stays text, for the field's check to say what it takes."""
    try:
        value = read_yaml(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


class _Mismatch(Exception):
    """A value that does not fit a type."""


def settings_fields(schema: type) -> list[dataclasses.Field]:
    """Return the fields of the dataclass `schema` that its constructor takes, in declaration order."""
    return [item for item in dataclasses.fields(schema) if item.init]


def field_names(schema: type) -> set[str]:
    """Return the keys that the dataclass `schema` takes."""
    return {item.name for item in settings_fields(schema)}


@functools.cache
def field_types(schema: type) -> dict[str, Any]:
    """Return each field's type, with the string annotations of `from __future__ import annotations` resolved."""
    return typing.get_type_hints(schema)


def bounds_of(schema: type) -> dict[str, dict[str, Any]]:
    """Return the bounds of the fields of `schema`: its `BOUNDS` table over those of its bases."""
    return {key: bound for cls in reversed(schema.__mro__) for key, bound in vars(cls).get("BOUNDS", {}).items()}


def _union_options(hint: Any) -> tuple | None:
    """Return the members of the union `hint` (`X | None` included), or None for another type."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else None


def is_sequence(hint: Any) -> bool:
    """Return whether a value of type `hint` can be a list (written "a,b" or "[a, b]")."""
    return any(typing.get_origin(option) in (list, tuple) for option in _union_options(hint) or (hint,))


def _enum_options(options: tuple) -> list[type[enum.Enum]]:
    """Return the enumerations among a union's members: transformers writes `Union[SchedulerType, str]` for a
    setting whose text must name one of the enumeration's members."""
    return [option for option in options if isinstance(option, type) and issubclass(option, enum.Enum)]


def describe(hint: Any) -> str:
    """Return what a value of type `hint` looks like, in words."""
    options = _union_options(hint)
    if options is not None:
        named = _enum_options(options)
        shown = [option for option in options if option is not type(None) and not (named and option is str)]
        return " or ".join(describe(option) for option in shown)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple) or hint in (list, tuple):
        plural = {str: "names", int: "whole numbers", float: "numbers"}.get(args[0] if args else None, "values")
        return f"a list of {plural} (a,b or [a, b])"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(member.value) for member in hint)
    words = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text", dict: "a mapping"}
    return words.get(origin or hint, getattr(hint, "__name__", str(hint)))


def _convert_one(value: Any, hint: Any, lenient: bool) -> Any:
    """Return `value` checked against type `hint`, converted only where it must be: `lenient` also takes ints
    for floats, numbers for text, numbers and yes/no written as text (YAML reads 1e-5 as text), lists as "a,b"
    and a single value as a list of one."""
    origin = typing.get_origin(hint) or hint
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if lenient and isinstance(value, str):
            try:
                return string_to_bool(value)  # transformers' words: yes/no, y/n, t/f
            except ArgumentTypeError:
                raise _Mismatch from None
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
    elif origin in (list, tuple):
        items = value
        if lenient and isinstance(value, str):
            items = [parse_value(item.strip()) for item in value.split(",")]
        elif lenient and (number or isinstance(value, bool)):
            items = [value]  # --seeds 3: a list of one
        if isinstance(items, (list, tuple)):
            item_hint = (typing.get_args(hint) or (Any,))[0]  # list[X] and tuple[X, ...]
            return origin(_convert(item, item_hint) for item in items)
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
    named = _enum_options(options)
    if named and isinstance(value, str) and all(value not in {member.value for member in e} for e in named):
        raise _Mismatch  # text standing for an enumeration's member names one
    for lenient in (False, True):
        for option in options:
            if option is not type(None):
                try:
                    return _convert_one(value, option, lenient)
                except _Mismatch:
                    pass
    raise _Mismatch


def _bounds_problem(value: Any, bounds: dict[str, Any]) -> str | None:
    """Return what `value` must be when it lies outside `bounds` ("min", "above", "max", "or"; "min_items" for a
    list; "choices" for a name), else None."""
    if isinstance(value, str) and "choices" in bounds and value not in bounds["choices"]:
        return "one of " + ", ".join(bounds["choices"])
    if isinstance(value, list) and len(value) < bounds.get("min_items", 0):
        return f"a list of at least {bounds['min_items']} name(s)"
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value in bounds.get("or", ()):
        return None
    low, above, high = bounds.get("min"), bounds.get("above"), bounds.get("max")
    if (low is None or value >= low) and (above is None or value > above) and (high is None or value <= high):
        return None
    limits = [f"{sign} {bounds[key]}" for key, sign in (("min", "≥"), ("above", ">"), ("max", "≤")) if key in bounds]
    sentinels = "".join(f" (or {v})" for v in bounds.get("or", ()))
    return " and ".join(limits) + sentinels


def check_values(values: dict[str, Any], schema: type, source: str) -> dict[str, Any]:
    """Return the entries of `values` that are fields of the dataclass `schema`, converted to the fields' types.

    Raises a ValueError naming `source`, the key and the value when a value has the wrong type ("abc" for a
    float, 1.5 for an int, "maybe" for a bool) or lies outside its bounds (`bounds_of`). Types come from the
    annotations, so a new field is checked without touching this function.
    """
    hints, bounds = field_types(schema), bounds_of(schema)
    checked = {}
    for key in field_names(schema) & values.keys():
        value, wanted = values[key], describe(hints[key])
        try:
            converted = _convert(value, hints[key])
        except _Mismatch:
            if value is None:
                raise UserError(f"{source}: {key} needs a value ({wanted})") from None
            raise UserError(f"{source}: {key} must be {wanted}, got {value!r}") from None
        problem = _bounds_problem(converted, bounds.get(key, {}))
        if problem:
            raise UserError(f"{source}: {key} must be {problem}, got {value!r}")
        checked[key] = converted
    return checked


def check_keys(keys: typing.Iterable[str], known: typing.Collection[str], source: str) -> None:
    """Raise a ValueError naming each key that is not in `known`, with the closest known ones."""
    unknown = [key for key in keys if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise UserError(f"{source}: unknown key(s) {'; '.join(hints)}")
