"""`nox -s ci`'s stages (noxfile.py, read as text: nox is not a dependency of the tests): every session runs once,
and a session installed ahead of its run installs in an earlier stage than it runs in."""

from __future__ import annotations

import ast
from pathlib import Path

NOXFILE = ast.parse((Path(__file__).resolve().parents[1] / "noxfile.py").read_text())


def assigned(target: str) -> object:
    """Return the literal value noxfile.py assigns to `target` (a name or a dotted attribute)."""
    for node in NOXFILE.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == target:
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py assigns no {target}")


def test_ci_runs_every_session_once_after_installing_it():
    stages = assigned("STAGES")
    ran = [name for running, _ in stages for name in running]
    assert sorted(ran) == sorted(assigned("nox.options.sessions")), "ci runs what `nox` runs, each once"
    for index, (_, installing) in enumerate(stages):
        for name in installing:
            ran_in = next(position for position, (running, _) in enumerate(stages) if name in running)
            assert ran_in > index, f"{name} installs in stage {index} but runs in stage {ran_in}"
            assert name != "vllm", "the vllm session swaps vLLM versions as it runs: it cannot install ahead"
