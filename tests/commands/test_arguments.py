"""The flags of any settings dataclass: TRL's TrlParser makes them from the fields; lopti's layer converts a settings
file's values as the flags convert text, returns only the settings given and words each mistake as one line."""

from dataclasses import dataclass, field

import pytest

from lopti.commands.arguments import load_yaml
from lopti.commands.settings import LoptiParser
from lopti.errors import SettingError, check_number


@dataclass
class Example:
    """An example command's settings: the value checks are the dataclass's own."""

    target: str = field(metadata={"help": "Where to write."})
    fast: bool = field(default=False, metadata={"help": "A switch."})
    sizes: list[int] = field(default_factory=lambda: [1, 2], metadata={"help": "Some sizes."})
    rate: float | None = field(default=None, metadata={"help": "A rate, 50% at most."})

    def __post_init__(self) -> None:
        if self.rate is not None:
            check_number("rate", self.rate, low=0, high=0.5)


def parser() -> LoptiParser:
    return LoptiParser([Example], prog="example")


def given(words: list[str]) -> dict:
    return parser().given(words)[0]


def parsed(words: list[str], from_file: dict | None = None) -> Example:
    (example,) = parser().build((from_file or {}) | given(words))
    return example


def test_flags_come_from_the_fields_and_a_flag_alone_means_true():
    assert parsed(["--target", "a", "--fast", "--sizes", "3", "4"]) == Example("a", True, [3, 4], None)
    assert parsed(["--target=a", "--fast", "false", "--rate", "1e-3", "--sizes", "5"]) == Example("a", False, [5], 1e-3)
    assert parsed(["--target", "a", "--rate", "null"]) == Example("a", False, [1, 2], None)


def test_a_list_written_a_comma_b_is_the_list_of_both():
    assert given(["--sizes", "3,4", "--target", "a"]) == {"sizes": [3, 4], "target": "a"}
    assert given(["--sizes=5,6"]) == {"sizes": [5, 6]}


def test_only_the_settings_given_come_back_so_a_files_values_stand():
    assert given(["--fast"]) == {"fast": True}
    assert parsed(["--rate", "0.2"], {"target": "b", "rate": 0.1}) == Example("b", rate=0.2)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--target", "a", "--sizez", "3"], "command line: unknown key(s) 'sizez' (did you mean sizes?)"),
        (["--target", "a", "stray"], "command line: unexpected 'stray'; settings are given as --key value"),
        (["--target", "a", "--fast", "maybe"], "command line: fast must be true or false, got 'maybe'"),
        (["--target"], "command line: target: expected one argument"),
        (["--target", "a", "--sizes", ""], "command line: sizes must be a whole number, got ''"),
        (["--target", ""], "command line: target: empty value; give one (or leave the flag out"),
        (["--target", "a", "--sizes", "[3"], "command line: sizes must be a whole number, got '[3'"),
        (["--fast"], "command line: --target is required"),
    ],
)
def test_bad_words_are_one_line_naming_the_key(words, message):
    with pytest.raises(ValueError) as error:
        parsed(words)
    assert str(error.value).startswith(message)


def test_a_value_out_of_its_bounds_is_refused_by_its_dataclass_naming_the_key():
    with pytest.raises(SettingError, match=r"^rate must be ≥ 0 and ≤ 0.5, got 0.7$") as error:
        parsed(["--target", "a", "--rate", "0.7"])
    assert error.value.key == "rate"
    with pytest.raises(SettingError, match=r"rate must be a finite number ≥ 0 and ≤ 0\.5, got nan"):
        parsed(["--target", "a", "--rate", "nan"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sizes": "x"}, "recipe.yaml: sizes must be a whole number, got 'x'"),
        ({"sizes": [1.5]}, "recipe.yaml: sizes must be a whole number, got '1.5'"),
        ({"fast": "maybe"}, "recipe.yaml: fast must be true or false, got 'maybe'"),
        ({"rate": "fast"}, "recipe.yaml: rate must be a number, got 'fast'"),
        ({"rat": 0.1}, "recipe.yaml: unknown key(s) 'rat' (did you mean rate?)"),
    ],
)
def test_a_files_values_are_converted_and_checked_as_the_flags_convert_text(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        parser().typed(values, "recipe.yaml")


def test_a_files_text_and_single_values_take_the_fields_types():
    typed = parser().typed({"target": 5, "sizes": 3, "rate": "1e-2", "fast": "yes"}, "recipe.yaml")
    assert typed == {"target": "5", "sizes": [3], "rate": 0.01, "fast": True}


def test_a_files_null_mapping_and_empty_list_stay_as_written():
    typed = parser().typed({"target": None, "sizes": [], "rate": None}, "recipe.yaml")
    assert typed == {"target": None, "sizes": [], "rate": None}
    assert parser().typed({"target": {"a": 1}}, "recipe.yaml") == {"target": {"a": 1}}
    assert parser().typed({"target": []}, "recipe.yaml") == {"target": []}  # report_to: [] in a recipe


def test_help_shows_each_field_with_its_help_and_default(capsys):
    with pytest.raises(SystemExit):
        given(["--help"])
    printed = " ".join(capsys.readouterr().out.split())
    for line in (
        "--target TARGET Where to write.",
        "--fast [FAST] A switch. (default: False)",
        "--rate RATE A rate, 50% at most. (default: None)",
    ):
        assert line in printed


def test_no_and_yes_are_text_for_text_fields_and_booleans_for_switches():
    assert parsed(["--target", "no", "--fast", "yes"]) == Example("no", True, [1, 2], None)
    assert parsed(["--target", "off", "--fast", "no"]) == Example("off", False, [1, 2], None)


def test_a_settings_file_reads_no_as_text_and_1e_5_as_a_number(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("save_strategy: no\nbf16: true\nlearning_rate: 1e-5\nname: yes\n")
    assert load_yaml(path) == {"save_strategy": "no", "bf16": True, "learning_rate": 1e-5, "name": "yes"}


def test_save_strategy_no_is_the_strategy_on_the_command_line_and_in_a_recipe(tmp_path):
    from lopti.commands.settings import resolve, split, train_parser

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("save_strategy: no\nlogging_strategy: steps\n")
    assert resolve(recipe, {})["save_strategy"] == "no"
    flags = train_parser().given(["--save_strategy", "no", "--output_dir", str(tmp_path / "run")])[0]
    assert split(resolve(None, flags))[1]["save_strategy"] == "no"


def test_a_float_setting_written_as_a_whole_number_stays_one_from_a_file_and_a_flag():
    """TRL types save_steps as a float (a ratio below 1): "8" is kept as 8, so a run's config.yaml records the recipe's
    value as written; "0.25", "1e-5" and "null" convert as before."""
    assert (
        given(["--target", "a", "--rate", "0"]) == {"target": "a", "rate": 0}
        and type(given(["--rate", "0"])["rate"]) is int
    )
    assert (
        parser().typed({"rate": 8}, "recipe.yaml")["rate"] == 8
        and type(parser().typed({"rate": 8}, "r")["rate"]) is int
    )
    assert given(["--rate", "0.25"])["rate"] == 0.25 and given(["--rate", "1e-5"])["rate"] == 1e-5
    assert given(["--rate", "null"])["rate"] is None
    with pytest.raises(ValueError, match=r"^command line: rate must be a number, got 'fast'$"):
        given(["--rate", "fast"])


def test_the_default_recipes_run_config_records_its_whole_numbers_as_written():
    from lopti.commands.settings import default_recipe, train_settings

    settings, _ = train_settings(None, {"output_dir": "unused"})
    assert load_yaml(default_recipe())["save_steps"] == 8
    assert type(settings["save_steps"]) is int and type(settings["logging_steps"]) is int
    assert type(settings["learning_rate"]) is float
