"""The package's layers import one way: core ← tasks ← train / diagnostics / integrations ← cli."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lopti"
ALLOWED = {
    "core": {"core"},
    "tasks": {"core", "tasks"},
    "train": {"core", "tasks", "train"},
    "diagnostics": {"core", "tasks", "train", "diagnostics"},
    "integrations": {"core", "tasks", "train", "integrations"},
}
BASE = {"errors"}  # lopti/errors.py imports no lopti module: every layer may raise its errors


def lopti_imports(path: Path) -> set[str]:
    """Return the lopti subpackages that a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found |= {name.split(".")[1] for name in names if name.startswith("lopti.") and name.count(".") >= 1}
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_upward_imports(layer):
    for path in (PACKAGE / layer).rglob("*.py"):
        upward = lopti_imports(path) - ALLOWED[layer] - BASE
        assert not upward, f"{path.relative_to(PACKAGE.parent)} imports lopti.{upward}"


def test_core_imports_neither_trl_nor_transformers():
    code = "import sys, lopti.core; print(sorted(m for m in ('trl', 'transformers', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_file_over_400_lines():
    long = [str(p) for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > 400]
    assert not long
