"""The flags of any settings dataclass: generated from its fields, read back as the fields' types."""

import re
from dataclasses import dataclass, field

import pytest

from lopti.cli import Parser
from lopti.commands.command_line import add_settings, given_settings, make_settings, reject_unknown, sections_of
from lopti.commands.fields import field_names


@dataclass
class Example:
    """An example command's settings."""

    target: str = field(metadata={"help": "Where to write."})
    fast: bool = field(default=False, metadata={"help": "A switch."})
    sizes: list[int] = field(default_factory=lambda: [1, 2], metadata={"help": "Some sizes.", "min": 1})
    rate: float | None = field(default=None, metadata={"help": "A rate, 50% at most.", "max": 0.5})


def parsed(words: list[str]) -> Example:
    parser = Parser(prog="example", allow_abbrev=False)
    add_settings(parser, sections_of(Example))
    args, extra = parser.parse_known_args(words)
    if extra:
        reject_unknown(extra, field_names(Example))
    return make_settings(Example, given_settings(args))


def test_flags_come_from_the_fields_and_a_flag_alone_means_true():
    assert parsed(["--target", "a", "--fast", "--sizes", "3,4"]) == Example("a", True, [3, 4], None)
    assert parsed(["--target=a", "--fast", "false", "--rate", "1e-3", "--sizes", "5"]) == Example("a", False, [5], 1e-3)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--target", "a", "--sizez", "3"], "command line: unknown key(s) 'sizez' (did you mean sizes?)"),
        (["--target", "a", "stray"], "command line: unexpected 'stray'; settings are given as --key value"),
        (["--target", "a", "--rate", "0.7"], "command line: rate must be ≤ 0.5, got 0.7"),
        (["--target", "a", "--fast", "maybe"], "command line: fast must be true or false, got 'maybe'"),
    ],
)
def test_bad_words_are_one_line_naming_the_key(words, message):
    with pytest.raises(ValueError) as error:
        parsed(words)
    assert str(error.value) == message


def test_a_field_without_default_is_a_required_flag(capsys):
    with pytest.raises(SystemExit):
        parsed(["--fast"])
    assert "the following arguments are required: --target" in capsys.readouterr().err


def test_help_shows_each_field_with_its_type_help_and_default(capsys):
    with pytest.raises(SystemExit):
        parsed(["--help"])
    printed = " ".join(capsys.readouterr().out.split())
    assert "usage: example [-h] --target TEXT [--KEY VALUE ...]" in printed
    assert re.search(r"Example \(\w+\): An example command's settings\.", printed)  # the class and its package
    for line in (
        "--target TEXT Where to write. (required)",
        "--fast [BOOL] A switch. (default: false)",
        "--sizes A,B Some sizes. (default: 1,2)",
        "--rate FLOAT A rate, 50% at most. (default: null)",
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
