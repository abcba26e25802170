"""Every command's --help lists every field of its settings dataclasses with the field's help, and a field added
to a dataclass is a flag and a YAML key at once, without touching lopti/cli.py."""

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lopti.cli import main
from lopti.commands import eval_run, settings, train_run
from lopti.diagnostics.analyze import AnalyzeConfig
from lopti.errors import check_number
from lopti.experiments.compare import CompareConfig
from lopti.tasks.kk.task import KKData
from lopti.tasks.math.task import MathData
from lopti.train.config import LoptiGRPOConfig

SETTINGS = {
    "train": [settings.RunConfig, LoptiGRPOConfig],
    "eval": [eval_run.EvalConfig],
    "analyze": [AnalyzeConfig],
    "compare": [CompareConfig, settings.RunConfig, LoptiGRPOConfig],
    "data kk": [KKData],
    "data math": [MathData],
}
# flags that are not settings
FILES = {"train": {"config"}, "eval": {"config", "out"}, "analyze": {"config", "out"}, "compare": {"config"}}


def help_of(command: str, capsys) -> str:
    assert main([*command.split(), "--help"]) == 0
    return capsys.readouterr().out


def squeezed(text: str) -> str:
    """Return `text` without whitespace: argparse wraps help lines, and breaks words at hyphens."""
    return "".join(text.split())


@pytest.mark.parametrize("command", SETTINGS)
def test_help_lists_every_field_with_its_help(command, capsys):
    printed = help_of(command, capsys)
    helps = {}  # a key that two dataclasses share (data_seed) is listed once, with the last one's help
    switches = set()  # HfArgumentParser's --no_KEY for each switch that is on by default
    for schema in SETTINGS[command]:
        for item in dataclasses.fields(schema):
            if item.init:
                helps[item.name] = item.metadata["help"]
                switches |= {f"no_{item.name}"} if item.default is True else set()
    flags = set(re.findall(r"^ {2}--(\w+)", printed, re.MULTILINE))
    assert flags == set(helps) | switches | FILES.get(command, set())  # no field missing, nothing else
    for name, text in helps.items():
        assert squeezed(text) in squeezed(printed), name


def test_train_help_lists_the_run_then_the_trainer_each_with_its_own_settings_first(capsys):
    printed = help_of("train", capsys)
    flags = re.findall(r"^ {2}--(\w+)", printed, re.MULTILINE)
    assert len(flags) > 200  # TRL's GRPOConfig and transformers' TrainingArguments: every field
    # one group per dataclass (HfArgumentParser's), its own fields before those it inherits
    order = [flags.index(name) for name in ("model", "people", "ar_alpha", "adam_beta1", "num_generations")]
    assert order == sorted(order)
    headings = [line for line in printed.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert headings[1:] == [f"{settings.RunConfig._argument_group_name}:", f"{LoptiGRPOConfig._argument_group_name}:"]


@dataclass(kw_only=True)
class EvalWithBeams(eval_run.EvalConfig):
    """EvalConfig with one more field."""

    beam_width: int = field(default=1, metadata={"help": "A setting written after the command line."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("beam_width", self.beam_width, low=1)


def test_a_new_eval_field_is_a_flag_without_touching_the_cli(monkeypatch, capsys, tmp_path):
    seen = []

    def run_eval(config, out):
        seen.append(config)
        raise ValueError("evaluation replaced by the test")

    monkeypatch.setattr(eval_run, "EvalConfig", EvalWithBeams)
    monkeypatch.setattr(eval_run, "run_eval", run_eval)
    printed = " ".join(help_of("eval", capsys).split())
    assert "--beam-width BEAM_WIDTH A setting written after the command line. (default: 1)" in printed
    assert main(["eval", "--model", "tiny", "--beam_width", "3", "--out", str(tmp_path / "ev")]) == 2
    assert seen[0].beam_width == 3
    assert main(["eval", "--model", "tiny", "--beam_width", "0"]) == 2
    assert "command line: beam_width must be ≥ 1, got 0" in capsys.readouterr().err


@dataclass
class RunWithKnob(settings.RunConfig):
    """RunConfig with one more field."""

    knob: float = field(default=0.5, metadata={"help": "A run setting written after the command line."})


@pytest.fixture
def trained(monkeypatch):
    """Return the (run, trainer keyword arguments) that `lopti train` would train with, training nothing."""
    seen = []

    def train(all_settings):
        seen.append(settings.split(all_settings))
        raise ValueError("training replaced by the test")

    monkeypatch.setattr(train_run, "train", train)
    return seen


def test_a_new_run_field_is_a_yaml_key_and_a_flag_without_touching_the_cli(monkeypatch, trained, tmp_path, capsys):
    monkeypatch.setattr(settings, "RunConfig", RunWithKnob)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"knob": 0.25, "max_steps": 3, "output_dir": str(tmp_path / "run")}))
    assert "--knob KNOB" in help_of("train", capsys)
    assert main(["train", "--config", str(recipe)]) == 2
    assert main(["train", "--config", str(recipe), "--knob", "0.75"]) == 2
    assert [run.knob for run, _ in trained] == [0.25, 0.75]
    assert main(["train", "--config", str(recipe), "--knb", "1"]) == 2
    assert "unknown key(s) 'knb' (did you mean knob?)" in capsys.readouterr().err


def test_yaml_then_command_line_and_a_flag_alone_means_true(trained, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    settings_in_file = {"max_steps": 3, "learning_rate": 0.1, "lopti": False, "num_iterations": 2}
    settings_in_file |= {"task": "kk", "people": "3"}
    recipe.write_text(yaml.safe_dump({**settings_in_file, "output_dir": str(tmp_path / "run")}))
    argv = ["train", "--config", str(recipe), "--max_steps", "5", "--lopti", "--learning-rate=0.2", "--people", "3-4"]
    assert main(argv) == 2
    run, trainer_kwargs = trained[0]
    assert (trainer_kwargs["max_steps"], trainer_kwargs["lopti"], trainer_kwargs["learning_rate"]) == (5, True, 0.2)
    assert (trainer_kwargs["num_iterations"], run.people, run.train_puzzles) == (2, "3-4", 900)


def test_version_prints_the_version_pyproject_declares(capsys):
    """`lopti --version` reports the installed package, which must be the version pyproject.toml builds."""
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE).group(1)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lopti {declared}"
