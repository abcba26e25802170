"""Each optional part of lopti checks its extra when imported: a missing or out-of-range package is one line naming
the package, the range and the extra to install. Runs in every test environment (noxfile.py), the verl one
without TRL included."""

import importlib.util
import subprocess
import sys
from importlib import metadata

import pytest

from lopti import extras
from lopti.extras import MissingExtra, require, unmet


def test_every_extra_is_met_where_it_is_installed():
    for extra in ("trl", "cli", "verl"):
        names = {"trl": "trl", "cli": "gguf", "verl": "verl"}
        if importlib.util.find_spec(names[extra]) is not None:
            assert unmet(extra) == [], extra


def test_a_missing_package_is_named_with_its_range(monkeypatch):
    real_version = metadata.version

    def version(name):
        if name == "trl":
            raise metadata.PackageNotFoundError(name)
        return "0.27.0" if name == "accelerate" else real_version(name)

    monkeypatch.setattr(extras.metadata, "version", version)
    with pytest.raises(MissingExtra) as error:
        require("trl", "lopti.train")
    assert str(error.value) == (
        "lopti.train needs trl<1.17,>=1.16 (not installed), accelerate<2,>=1.10.1 (0.27.0 is installed): "
        'pip install "lopti[trl]"'
    )


def test_an_extra_that_includes_another_checks_both(monkeypatch):
    monkeypatch.setattr(extras.metadata, "version", lambda name: "0.27.0" if name == "trl" else "999")
    problems = unmet("cli")
    assert "trl<1.17,>=1.16 (0.27.0 is installed)" in problems
    assert any(problem.startswith("gguf") for problem in problems)  # cli's own, 999 is out of its range


# a Python that sees TRL as not installed, then runs the given code
WITHOUT_TRL = """
import sys
from importlib import metadata
version = metadata.version
def hidden(name):
    if name == "trl":
        raise metadata.PackageNotFoundError(name)
    return version(name)
metadata.version = hidden
"""


def test_without_trl_the_trainer_and_the_command_say_which_extra_in_one_line():
    code = WITHOUT_TRL + "import lopti.train"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.returncode == 1
    assert "lopti.extras.MissingExtra: lopti.train needs trl<1.17,>=1.16 (not installed)" in imported.stderr
    assert "import trl" not in imported.stderr  # stopped before TRL's own import
    code = WITHOUT_TRL + "from lopti.cli import main; sys.exit(main(['train']))"
    command = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert command.returncode == 2
    assert command.stderr.count("\n") == 1 and "lopti train needs trl<1.17,>=1.16 (not installed)" in command.stderr
    assert 'pip install "lopti[cli]"' in command.stderr


def test_without_trl_the_cpu_engine_says_which_extra_in_one_line():
    imported = subprocess.run([sys.executable, "-c", WITHOUT_TRL + "import lopti.cpu"], capture_output=True, text=True)
    assert imported.returncode == 1
    assert "lopti.extras.MissingExtra: lopti.cpu needs trl<1.17,>=1.16 (not installed)" in imported.stderr
    assert "import accelerate" not in imported.stderr and "import trl" not in imported.stderr


def test_lopti_data_needs_only_the_base_install(tmp_path):
    code = WITHOUT_TRL + f"from lopti.cli import main; assert main(['data', 'math', '--out', {str(tmp_path)!r}]) == 0\n"
    code += "assert 'trl' not in sys.modules and 'lopti.train' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert any(tmp_path.iterdir())
