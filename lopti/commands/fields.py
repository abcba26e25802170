"""Typing and checking of settings dataclasses: what a value of each field looks like, and whether it fits.

Every command's settings are dataclasses whose fields carry their help and bounds in the metadata ("help", and
"min" / "above" / "max" / "or" for numbers, "min_items" for lists, "choices" for names). These functions read
the annotations and the metadata, so a new field is described, converted and checked without touching any of them.
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
from typing import Any, Literal

import yaml

from lopti.errors import UserError

BOOL_TAG = "tag:yaml.org,2002:bool"
# YAML 1.1's other spellings of true and false, which a field of type bool also takes (`--resume yes`)
BOOL_WORDS = {"yes": True, "on": True, "y": True, "no": False, "off": False, "n": False}


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


TYPE_WORDS = {bool: "BOOL", int: "INT", float: "FLOAT", str: "TEXT", list: "A,B", tuple: "A,B", dict: "MAPPING"}


class _Mismatch(Exception):
    """A value that does not fit a type."""


def settings_fields(schema: type) -> list[dataclasses.Field]:
    """Return the fields of the dataclass `schema` that its constructor takes, in declaration order."""
    return [item for item in dataclasses.fields(schema) if item.init]


def field_names(schema: type) -> set[str]:
    """Return the keys that the dataclass `schema` takes."""
    return {item.name for item in settings_fields(schema)}


def field_default(item: dataclasses.Field) -> Any:
    """Return the default value of a field, or dataclasses.MISSING for a required one."""
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


@functools.cache
def field_types(schema: type) -> dict[str, Any]:
    """Return each field's type, with the string annotations of `from __future__ import annotations` resolved."""
    return typing.get_type_hints(schema)


def _union_options(hint: Any) -> tuple | None:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else None


def describe(hint: Any) -> str:
    """Return what a value of type `hint` looks like, in words."""
    options = _union_options(hint)
    if options is not None:
        return " or ".join(describe(option) for option in options if option is not type(None))
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


def type_word(hint: Any) -> str:
    """Return a short word for a value of type `hint`, as --help shows it after the flag."""
    words = []
    for option in _union_options(hint) or (hint,):
        origin = typing.get_origin(option) or option
        if origin is Literal:
            word = "{" + ",".join(map(str, typing.get_args(option))) + "}"
        elif isinstance(origin, type) and issubclass(origin, enum.Enum):
            word = "{" + ",".join(str(member.value) for member in origin) + "}"
        else:
            word = TYPE_WORDS.get(origin, "VALUE") if option is not type(None) else ""
        if word and word not in words:
            words.append(word)
    return "|".join(words) or "VALUE"


def shown_value(value: Any) -> str:
    """Return a default as it would be written on the command line."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return ",".join(map(shown_value, value)) or "[]"
    if value is None or isinstance(value, bool) or value == "":
        return yaml.safe_dump(value).split("\n")[0]  # null, true, false, ''
    return str(value)


def takes_bool(hint: Any) -> bool:
    """Return whether true/false is a value of type `hint` (so that `--flag` alone can mean true)."""
    return hint is bool or bool in (_union_options(hint) or ())


def _convert_one(value: Any, hint: Any, lenient: bool) -> Any:
    """Return `value` checked against type `hint`, converted only where it must be: `lenient` also takes ints
    for floats, numbers for text, numbers written as text (YAML reads 1e-5 as text), lists as "a,b" and a
    single value as a list of one."""
    origin = typing.get_origin(hint) or hint
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if lenient and isinstance(value, str) and value.lower() in BOOL_WORDS:
            return BOOL_WORDS[value.lower()]
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


def check_values(
    values: dict[str, Any], schema: type, source: str, bounds: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Return the entries of `values` that are fields of the dataclass `schema`, converted to the fields' types.

    Raises a ValueError naming `source`, the key and the value when a value has the wrong type ("abc" for a
    float, 1.5 for an int, "maybe" for a bool) or lies outside the field's bounds: metadata "min" / "above" /
    "max" / "or" (allowed sentinels), or `bounds[key]` for fields of classes lopti does not own. Types come
    from the annotations, so a new field is checked without touching this function.
    """
    hints = field_types(schema)
    fields = {item.name: item for item in settings_fields(schema)}
    checked = {}
    for key, value in values.items():
        if key not in fields:
            continue
        try:
            converted = _convert(value, hints[key])
        except _Mismatch:
            wanted = describe(hints[key])
            if value is None:
                raise UserError(f"{source}: {key} needs a value ({wanted})") from None
            raise UserError(f"{source}: {key} must be {wanted}, got {value!r}") from None
        problem = _bounds_problem(converted, {**fields[key].metadata, **(bounds or {}).get(key, {})})
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


def parse_value(text: str) -> Any:
    """Return a command-line value as a settings file reads it (`read_yaml`), with "1e-5"-style floats understood."""
    value = read_yaml(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value
