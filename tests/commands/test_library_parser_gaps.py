"""What transformers' `HfArgumentParser` and TRL's `TrlParser` (HfArgumentParser with --config) do not do that `lopti`
commands rely on: what lopti/commands/arguments.py adds over TrlParser. Each test fails when a release closes its gap,
so that the layer can shrink.
"""

import argparse
from dataclasses import dataclass, field

import pytest
from transformers import HfArgumentParser
from trl import GRPOConfig, TrlParser

BASE = "output_dir: {out}\nuse_cpu: true\nbf16: false\nreport_to: []\n"


def recipe(tmp_path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(BASE.format(out=tmp_path / "out") + text)
    return str(path)


def from_recipe(tmp_path, text: str) -> GRPOConfig:
    (config,) = TrlParser((GRPOConfig,)).parse_args_and_config(["--config", recipe(tmp_path, text)])
    return config


def test_field_metadata_beyond_help_is_handed_to_argparse():
    """Every metadata key goes to `add_argument`, so a field's bounds are checked in its class's `__post_init__`."""

    @dataclass
    class Bounded:
        steps: int = field(default=1, metadata={"help": "Steps.", "min": 1})

    with pytest.raises(TypeError, match="unexpected keyword argument 'min'"):
        HfArgumentParser((Bounded,))


def test_a_value_past_its_bound_builds_the_config(tmp_path):
    """Neither library checks these bounds (LoptiGRPOConfig.TRL_BOUNDS; tests/commands/test_trainer_bounds.py)."""
    assert from_recipe(tmp_path, "temperature: -1\n").temperature == -1


def test_a_recipe_value_of_the_wrong_type_builds_the_config(tmp_path):
    """A YAML value that is not text reaches the dataclass unchecked: lopti converts each by its flag's type
    (`LoptiParser.typed`)."""
    assert from_recipe(tmp_path, "max_steps: 1.5\n").max_steps == 1.5
    assert from_recipe(tmp_path, "seed: yes\n").seed is True  # PyYAML's YAML 1.1 booleans


def test_a_bad_value_is_argparse_s_usage_block_naming_neither_file_nor_key(tmp_path, capsys):
    with pytest.raises(SystemExit):
        from_recipe(tmp_path, "learning_rate: abc\n")
    said = capsys.readouterr().err
    assert said.startswith("usage:") and "recipe.yaml" not in said


def test_an_unknown_recipe_key_is_refused_without_the_closest_names(tmp_path):
    with pytest.raises(ValueError, match="Unknown arguments from config file") as raised:
        from_recipe(tmp_path, "learning_rat: 0.1\n")
    assert "learning_rate" not in str(raised.value)


def test_a_key_two_dataclasses_share_is_refused_unless_argparse_resolves_it():
    """`lopti train` splits one recipe between RunConfig and LoptiGRPOConfig, which share data_seed: lopti's parser
    passes argparse's conflict_handler="resolve" and gives the value to both."""

    @dataclass
    class Data:
        data_seed: int = field(default=0, metadata={"help": "Seed of the data."})

    with pytest.raises(argparse.ArgumentError, match="conflicting option strings"):
        HfArgumentParser((Data, GRPOConfig))


def test_a_list_is_space_separated_words_not_a_settings_file_s_a_b():
    @dataclass
    class Seeds:
        seeds: list[int] = field(default_factory=lambda: [0], metadata={"help": "Seeds."})

    assert HfArgumentParser((Seeds,)).parse_args_into_dataclasses(["--seeds", "1", "2"])[0].seeds == [1, 2]
    with pytest.raises(SystemExit):
        HfArgumentParser((Seeds,)).parse_args_into_dataclasses(["--seeds", "1,2"])
