"""`check_values`: any dataclass's annotations and `BOUNDS` table give the type and bound checks of its settings."""

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pytest

from lopti.commands.fields import check_values


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass
class Example:
    steps: int = 1
    rate: float = 0.1
    names: list[str] = field(default_factory=list)
    edges: list[float] | None = None
    flag: bool = False
    label: str | None = None
    mode: Mode | str = Mode.FAST
    order: Literal["low", "high"] = "low"
    free: int | str | None = None
    pair: tuple[float, ...] = (0.0, 1.0)
    seeds: list[int] = field(default_factory=list)
    BOUNDS: ClassVar = {"steps": {"min": 1, "or": (-1,)}, "rate": {"above": 0, "max": 1}}


@pytest.mark.parametrize(
    ("values", "checked"),
    [
        ({"steps": 3, "rate": 1}, {"steps": 3, "rate": 1}),  # an int stands for a float
        ({"steps": "3", "rate": "1e-1"}, {"steps": 3, "rate": 0.1}),  # YAML reads 1e-1 as text
        ({"steps": -1}, {"steps": -1}),  # an allowed sentinel below the minimum
        ({"names": "a, b", "edges": "0,0.5,1"}, {"names": ["a", "b"], "edges": [0, 0.5, 1]}),
        ({"edges": None, "label": None, "free": "x"}, {"edges": None, "label": None, "free": "x"}),
        ({"mode": "slow", "order": "high", "flag": True}, {"mode": "slow", "order": "high", "flag": True}),
        ({"pair": "0,0.5", "seeds": 3}, {"pair": (0, 0.5), "seeds": [3]}),  # a tuple; one value for a list
        ({"unknown": object()}, {}),  # not a field: check_keys's business
    ],
)
def test_fitting_values_pass(values, checked):
    assert check_values(values, Example, "here") == checked


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"steps": 1.5}, "here: steps must be a whole number, got 1.5"),
        ({"steps": 2.0}, "here: steps must be a whole number, got 2.0"),
        ({"steps": True}, "here: steps must be a whole number, got True"),
        ({"steps": 0}, "here: steps must be ≥ 1 (or -1), got 0"),
        ({"rate": "abc"}, "here: rate must be a finite number, got 'abc'"),
        ({"rate": "nan"}, "here: rate must be a finite number, got 'nan'"),
        ({"rate": 0}, "here: rate must be > 0 and ≤ 1, got 0"),
        ({"rate": 1.5}, "here: rate must be > 0 and ≤ 1, got 1.5"),
        ({"flag": "maybe"}, "here: flag must be true or false, got 'maybe'"),
        ({"names": None}, "here: names needs a value (a list of names (a,b or [a, b]))"),
        ({"edges": "0,x"}, "here: edges must be a list of numbers (a,b or [a, b]), got '0,x'"),
        ({"order": "middle"}, "here: order must be one of 'low', 'high', got 'middle'"),
        # transformers' `Union[SchedulerType, str]`: the text names a member
        ({"mode": "anything"}, "here: mode must be one of 'fast', 'slow', got 'anything'"),
        ({"label": ["a"]}, "here: label must be text, got ['a']"),
        ({"pair": "0,x"}, "here: pair must be a list of numbers (a,b or [a, b]), got '0,x'"),
    ],
)
def test_misfits_name_the_key_and_the_value(values, message):
    with pytest.raises(ValueError) as error:
        check_values(values, Example, "here")
    assert str(error.value) == message


@dataclass
class Stricter(Example):
    BOUNDS: ClassVar = {"steps": {"min": 5}}


def test_a_subclass_table_replaces_the_bounds_of_the_keys_it_names():
    with pytest.raises(ValueError, match=r"here: steps must be ≥ 5, got 3"):
        check_values({"steps": 3}, Stricter, "here")
    with pytest.raises(ValueError, match=r"here: rate must be > 0 and ≤ 1, got 2"):  # the base's bound stays
        check_values({"rate": 2}, Stricter, "here")
