"""The package's layers import one way (CONTRIBUTING.md's Layout section names them):

    core ← tasks ← models, evaluation ← diagnostics ← commands ← experiments ← cli
    core ← train (the TRL integration) ← cpu (the CPU engine) ← commands;  core, tasks ← integrations (verl)

The CPU engine is entered from its package only: the other layers import `lopti.cpu`, never its modules.

`errors`, `bounded`, `console`, `extras`, `files` (folder locks, whole-or-absent writes) and `run_folder` (what a run
folder holds) are leaf modules every layer but core may use.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lopti"
LEAVES = {"errors", "bounded", "console", "extras", "files", "run_folder"}
ALLOWED = {
    "core": {"core"},
    "tasks": {"core", "tasks"} | LEAVES,
    "models": {"core", "tasks", "models"} | LEAVES,
    "evaluation": {"core", "tasks", "evaluation"} | LEAVES,
    "train": {"core", "train"} | LEAVES,
    "cpu": {"core", "train", "cpu"} | LEAVES,
    "diagnostics": {"core", "tasks", "models", "evaluation", "diagnostics"} | LEAVES,
    "integrations": {"core", "tasks", "integrations"} | LEAVES,
    "commands": {"core", "tasks", "models", "evaluation", "train", "cpu", "diagnostics", "commands"} | LEAVES,
    "experiments": {"core", "tasks", "models", "evaluation", "train", "cpu", "diagnostics", "commands", "experiments"}
    | LEAVES,
    "errors": set(),
    "extras": {"errors"},
    "bounded": {"errors"},
    "console": {"core"},
    "files": {"errors"},
    "run_folder": set(),
}


def lopti_imports(path: Path) -> set[str]:
    """Return the lopti subpackages (or top-level modules) that a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module != "lopti" else [f"lopti.{alias.name}" for alias in node.names]
        found |= {name.split(".")[1] for name in names if name.startswith("lopti.")}
    return found


def layer_files(layer: str) -> list[Path]:
    """Return the files of a layer: a package's modules, or the one module of a leaf."""
    folder = PACKAGE / layer
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE / f"{layer}.py"]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_upward_imports(layer):
    files = layer_files(layer)
    assert any(path.is_file() and path.stat().st_size > 0 for path in files), f"layer {layer} has no code"
    for path in files:
        upward = lopti_imports(path) - ALLOWED[layer]
        assert not upward, f"{path.relative_to(PACKAGE.parent)} imports lopti.{upward}"


def imported_modules(path: Path) -> set[str]:
    """Return the full names of the lopti modules and packages a file imports (`from lopti.x import y`: lopti.x,
    and lopti.x.y where that is a module of lopti.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("lopti.")}


def test_the_cpu_engine_is_entered_from_its_package_only():
    inner = {f"lopti.cpu.{path.stem}" for path in (PACKAGE / "cpu").glob("*.py") if path.stem != "__init__"}
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "cpu") not in path.parents:
            reached = sorted(imported_modules(path) & inner)
            assert not reached, f"{path.relative_to(PACKAGE.parent)} imports {reached}: import them from lopti.cpu"


def test_code_outside_the_tasks_imports_no_tasks_own_modules():
    """Generic code reaches a task through its `Task` record (lopti.tasks.registry), so a task is added or removed
    in lopti/tasks alone: K&K's embedded models, for one, come to lopti.models from its `TaskModels`."""
    tasks = PACKAGE / "tasks"
    own = {f"lopti.tasks.{folder.name}" for folder in tasks.iterdir() if (folder / "__init__.py").is_file()}
    assert own >= {"lopti.tasks.kk", "lopti.tasks.math"}
    for path in sorted(PACKAGE.rglob("*.py")):
        if tasks not in path.parents:
            reached = sorted(m for m in imported_modules(path) if any(m == t or m.startswith(f"{t}.") for t in own))
            assert not reached, f"{path.relative_to(PACKAGE.parent)} imports {reached}: use the task's record"


def test_every_module_belongs_to_a_layer():
    top = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir() if not path.name.startswith("_")}
    top -= {"configs", "cli"}  # data, and the command line that may import everything
    assert top == set(ALLOWED)


def test_the_import_checker_sees_an_upward_import(tmp_path):
    upward = tmp_path / "upward.py"
    upward.write_text(
        "from lopti.commands.settings import RunConfig\nimport lopti.train.trainer\nfrom lopti import cli\n"
    )
    assert lopti_imports(upward) == {"commands", "train", "cli"}


def test_core_imports_neither_trl_nor_transformers():
    code = "import sys, lopti.core; print(sorted(m for m in ('trl', 'transformers', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_file_over_400_lines():
    long = [str(p) for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > 400]
    assert not long
