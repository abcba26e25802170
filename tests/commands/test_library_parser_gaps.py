"""What TRL's `TrlParser` (transformers' `HfArgumentParser` with --config) does not do that `lopti` commands rely on:
why lopti/commands/fields.py and command_line.py still stand beside it. Each test fails when a release closes its gap.
"""

import pytest
from trl import GRPOConfig, TrlParser

from lopti.commands.settings import RunConfig
from lopti.train.config import LoptiGRPOConfig

BASE = "output_dir: {out}\nuse_cpu: true\nbf16: false\nreport_to: []\n"


def recipe(tmp_path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(BASE.format(out=tmp_path / "out") + text)
    return str(path)


def test_field_metadata_beyond_help_is_handed_to_argparse():
    """lopti's fields carry their bounds in the metadata ("min", "above", "choices"); HfArgumentParser passes every
    metadata key to `add_argument`, so it cannot build lopti's commands until the bounds live elsewhere."""
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        TrlParser((RunConfig, LoptiGRPOConfig))


def test_an_unknown_recipe_key_is_refused_without_the_closest_names(tmp_path):
    with pytest.raises(ValueError, match="Unknown arguments from config file") as raised:
        TrlParser((GRPOConfig,)).parse_args_and_config(["--config", recipe(tmp_path, "learning_rat: 0.1\n")])
    assert "learning_rate" not in str(raised.value)


def test_a_value_past_its_bound_builds_the_config(tmp_path):
    (args,) = TrlParser((GRPOConfig,)).parse_args_and_config(["--config", recipe(tmp_path, "temperature: -1\n")])
    assert args.temperature == -1
