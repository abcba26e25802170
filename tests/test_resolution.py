"""`lopti[verl]` resolves beside each of verl's extras, as a verl user installs it (`pip install "lopti[verl]"
"verl[EXTRA]==0.9.1"`): one resolution per extra and Python (3.11 and 3.12) for Linux x86-64, the platform of the
GPU clusters verl runs on (noxfile.py's `resolve` session). The answer is the resolver's list of pinned versions,
checked for verl's own pins.

The resolver is uv's (`uv pip compile`): it reads each wheel's metadata with HTTP range requests, where pip's dry run
downloads every wheel whole (several GB of CUDA libraries per extra). Both are exact resolvers, so a set that uv
finds is one pip can install; the `verl` session installs `verl[cpu]` beside `lopti[verl]` with pip itself.
"""

from __future__ import annotations

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
PLATFORM = "x86_64-manylinux_2_28"  # the platform torch's Linux wheels are built for
# what the resolution leaves out of verl's extras, by name: a pin no index has, and a name PyPI gives another project
LEFT_OUT = {
    "megatron-bridge": "verl[megatron] pins 0.5.2, which PyPI does not have: verl's extra does not resolve alone",
    "apex": "NVIDIA's apex installs from its repository; PyPI's apex is another project, whose dependencies fail",
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


def resolve(requested: list[str], python: str, folder: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Resolve `requested` for `python` on Linux x86-64; return uv's answer and the versions it chose by name."""
    interpreter = shutil.which(f"python{python}")
    assert interpreter, f"python{python} is not on PATH (noxfile.py finds pyenv's Pythons)"
    assert shutil.which("uv"), "uv is not installed (noxfile.py's resolve session installs it)"
    (folder / "requested.txt").write_text("\n".join(requested) + "\n")
    command = ["uv", "pip", "compile", "--no-config", "--no-python-downloads", "--python", interpreter,
               "--python-platform", PLATFORM, "--no-header", "--no-annotate", "--quiet",
               str(folder / "requested.txt")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    chosen = {}
    for line in done.stdout.splitlines():  # `name==version`, or `name @ url` for lopti itself
        name, separator, version = line.replace(" @ ", "==").partition("==")
        if separator:
            chosen[name.strip()] = version.strip()
    return done, chosen


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("extra", sorted(PINS))
def test_lopti_verl_installs_beside_verls_extra(verl_requirements, extra, python, tmp_path):
    requested = [f"lopti[verl] @ {ROOT.as_uri()}", f"verl=={VERL}", *extra_requirements(verl_requirements, extra)]
    done, chosen = resolve(requested, python, tmp_path)
    assert done.returncode == 0, f"verl[{extra}]=={VERL} with lopti[verl] on Python {python}:\n{done.stderr[-3000:]}"
    assert "lopti" in chosen and chosen["verl"] == VERL
    for name, version in PINS[extra].items():
        assert chosen[name] == version, f"verl[{extra}] pins {name}=={version}, uv chose {chosen[name]}"


def test_the_resolution_reports_a_conflict(tmp_path):
    """A requirement lopti cannot meet (torch 2.10, below its range) is refused: the check can fail."""
    done, _ = resolve([f"lopti[verl] @ {ROOT.as_uri()}", "torch==2.10.0"], PYTHONS[0], tmp_path)
    assert done.returncode != 0 and "torch" in done.stderr
