"""The flags of any settings dataclass: transformers' HfArgumentParser makes them from the fields; lopti's layer
reads their values as a settings file's, returns only the ones given and words each mistake as one line."""

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from lopti.commands.command_line import SettingsParser, make_settings


@dataclass
class Example:
    """An example command's settings."""

    target: str = field(metadata={"help": "Where to write."})
    fast: bool = field(default=False, metadata={"help": "A switch."})
    sizes: list[int] = field(default_factory=lambda: [1, 2], metadata={"help": "Some sizes."})
    rate: float | None = field(default=None, metadata={"help": "A rate, 50% at most."})
    BOUNDS: ClassVar = {"sizes": {"min_items": 1}, "rate": {"max": 0.5}}


def given(words: list[str]) -> dict:
    settings, _ = SettingsParser([Example], prog="example").given(words)
    return settings


def parsed(words: list[str]) -> Example:
    return make_settings(Example, given(words))


def test_flags_come_from_the_fields_and_a_flag_alone_means_true():
    assert parsed(["--target", "a", "--fast", "--sizes", "3,4"]) == Example("a", True, [3, 4], None)
    assert parsed(["--target=a", "--fast", "false", "--rate", "1e-3", "--sizes", "5"]) == Example("a", False, [5], 1e-3)
    assert parsed(["--target", "a", "--sizes", "[6, 7]", "--rate", "null"]) == Example("a", False, [6, 7], None)


def test_only_the_settings_given_come_back_so_a_files_values_stand():
    assert given(["--fast"]) == {"fast": True}
    assert make_settings(Example, given(["--rate", "0.2"]), {"target": "b", "rate": 0.1}) == Example("b", rate=0.2)


GIVE_ONE = "give one (null for the setting's default, where it has one)"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--target", "a", "--sizez", "3"], "command line: unknown key(s) 'sizez' (did you mean sizes?)"),
        (["--target", "a", "stray"], "command line: unexpected 'stray'; settings are given as --key value"),
        (["--target", "a", "--rate", "0.7"], "command line: rate must be ≤ 0.5, got 0.7"),
        (["--target", "a", "--fast", "maybe"], "command line: fast must be true or false, got 'maybe'"),
        (["--target", "a", "--sizes", "[]"], "command line: sizes must be a list of at least 1 name(s), got []"),
        (["--target"], "command line: target: expected one argument"),
        (["--target", "a", "--sizes", ""], f"command line: sizes: empty value; {GIVE_ONE}"),
        (["--target", " "], f"command line: target: empty value; {GIVE_ONE}"),
        (
            ["--target", "a", "--sizes", "[3"],
            "command line: sizes must be a list of whole numbers (a,b or [a, b]), got '[3'",
        ),
        (["--fast"], "command line: --target is required"),
    ],
)
def test_bad_words_are_one_line_naming_the_key(words, message):
    with pytest.raises(ValueError) as error:
        parsed(words)
    assert str(error.value) == message


def test_help_shows_each_field_with_its_help_and_default(capsys):
    with pytest.raises(SystemExit):
        given(["--help"])
    printed = " ".join(capsys.readouterr().out.split())
    for line in (
        "--target TARGET Where to write. (required)",
        "--fast [FAST] A switch. (default: False)",
        "--sizes SIZES Some sizes. (default: [1, 2])",
        "--rate RATE A rate, 50% at most. (default: None)",
    ):
        assert line in printed


def test_no_and_yes_are_text_for_text_fields_and_booleans_for_switches():
    assert parsed(["--target", "no", "--fast", "yes"]) == Example("no", True, [1, 2], None)
    assert parsed(["--target", "off", "--fast", "no"]) == Example("off", False, [1, 2], None)


def test_save_strategy_no_is_the_strategy_on_the_command_line_and_in_a_recipe(tmp_path):
    from lopti.commands.fields import parse_value
    from lopti.commands.settings import resolve, split

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("save_strategy: no\nlogging_strategy: steps\n")
    assert resolve(recipe, {})["save_strategy"] == "no"
    settings = resolve(None, {"save_strategy": parse_value("no"), "output_dir": str(tmp_path / "run")})
    assert split(settings)[1]["save_strategy"] == "no"
