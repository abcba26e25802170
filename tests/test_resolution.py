"""pip resolves `lopti[verl]` beside each of verl's extras, as a verl user installs it (`pip install "lopti[verl]"
"verl[EXTRA]==0.9.1"`): one dry run per extra and Python (3.11 and 3.12, through `pip --python`; noxfile.py's
`resolve` session). The answer is pip's report of what it would install, checked for verl's own pins.

A few of verl's GPU extras' requirements are source distributions that build only with CUDA: pip cannot read their
metadata on a CPU machine. So the dry run asks for verl's extra requirement by requirement, with those left out by
name (`LEFT_OUT`): a failure to build them is not a conflict, and leaving them out checks everything else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
VERL = "0.9.1"
# what the dry run leaves out of verl's extras, by name: sdists whose build needs torch and CUDA at metadata time
# (flash-attn) or a CUDA toolchain (apex, transformer-engine's meta package), and a pin no index has
LEFT_OUT = {
    "flash-attn": "a CUDA-only sdist",
    "apex": "a CUDA-only sdist",
    "transformer-engine": "a CUDA-only sdist",
    "megatron-bridge": "verl[megatron] pins 0.5.2, which PyPI does not have: verl's extra does not resolve alone",
}
PINS = {"vllm": {"torch": "2.11.0", "transformers": "5.9.0"}, "cpu": {"torch": "2.11.0", "transformers": "5.9.0"},
        "fsdp": {"torch": "2.11.0", "trl": "0.27.0"}, "megatron": {"torch": "2.11.0", "trl": "0.27.0"}}  # fmt: skip
PYTHONS = ["3.11", "3.12"]  # what lopti declares and CI tests (pyproject.toml's requires-python)

pytestmark = pytest.mark.resolution


@pytest.fixture(scope="module")
def verl_requirements(tmp_path_factory) -> list[Requirement]:
    """Return verl's requirements as its wheel's metadata lists them (downloaded, no dependencies)."""
    folder = tmp_path_factory.mktemp("verl")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"verl=={VERL}", "-d", str(folder)]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no package index answered (pip download verl=={VERL}): {done.stderr.strip().splitlines()[-1:]}")
    (wheel,) = folder.glob("verl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    return [Requirement(line) for line in metadata.get_all("Requires-Dist")]


def extra_requirements(requirements: list[Requirement], extra: str) -> list[str]:
    """Return what `verl[extra]` asks for beyond verl itself, following verl's extras that name verl's others, with
    `LEFT_OUT` left out."""
    found = []
    for requirement in requirements:
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        if requirement.name == "verl":
            found += [line for sub in sorted(requirement.extras) for line in extra_requirements(requirements, sub)]
        elif requirement.name not in LEFT_OUT:
            found.append(str(requirement).split(";")[0].strip())
    return found


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("extra", sorted(PINS))
def test_lopti_verl_installs_beside_verls_extra(verl_requirements, extra, python, tmp_path):
    interpreter = shutil.which(f"python{python}")
    assert interpreter, f"python{python} is not on PATH (noxfile.py finds pyenv's Pythons)"
    report = tmp_path / "report.json"
    requested = [f"lopti[verl] @ {ROOT.as_uri()}", f"verl=={VERL}", *extra_requirements(verl_requirements, extra)]
    command = [sys.executable, "-m", "pip", "--python", interpreter, "install", "--dry-run", "--ignore-installed",
               "--quiet", "--report", str(report), *requested]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"verl[{extra}]=={VERL} with lopti[verl] on Python {python}:\n{done.stderr[-3000:]}"
    installed = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert installed["lopti"] and installed["verl"] == VERL
    for name, version in PINS[extra].items():
        assert installed[name] == version, f"verl[{extra}] pins {name}=={version}, pip chose {installed[name]}"
