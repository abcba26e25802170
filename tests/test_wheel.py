"""lopti as a user installs it: a wheel built from this checkout, installed (not editable) into a fresh virtual
environment, trains from another folder with only what the wheel ships — the recipes, the tiny model's warm-start
weights and its tokenizer files."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SHIPPED = [  # what `lopti train --config <the installed kk-tiny-cpu.yaml>` reads from the package
    "lopti/configs/kk-tiny-cpu.yaml",
    "lopti/models/shipped/tiny/model.safetensors",
    "lopti/models/shipped/tiny/config.json",
    "lopti/models/shipped/tiny/tokenizer.json",
    "lopti/models/shipped/tiny/tokenizer_config.json",
    "lopti/models/shipped/tiny/chat_template.jinja",
]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_environment_trains_from_another_folder(tmp_path):
    run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet", "-w", str(tmp_path / "dist")],
        cwd=tmp_path)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("lopti-*.whl")
    assert set(SHIPPED) <= set(zipfile.ZipFile(wheel).namelist())

    # a fresh environment with lopti from the wheel alone; its dependencies (torch, TRL, ...) are read from this
    # environment's site-packages through a .pth file, which puts them on the path but runs none of the .pth
    # files there, so this checkout's editable install stays out of it
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet",
         str(wheel)], cwd=tmp_path)  # fmt: skip

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "LOPTI_CACHE": str(tmp_path / "cache")}  # nothing cached by this checkout's runs
    located = run([str(python), "-c", "import lopti; print(lopti.__file__)"], elsewhere, env)
    assert Path(located.strip()).is_relative_to(site)
    lopti = str(venv / "bin" / "lopti")
    assert run([lopti, "--version"], elsewhere, env).strip().startswith("lopti ")

    recipe = site / "lopti" / "configs" / "kk-tiny-cpu.yaml"
    run([lopti, "train", "--config", str(recipe), "--max_steps", "2", "--eval_puzzles", "4",
         "--eval_sampled_prompts", "2", "--output_dir", "run"], elsewhere, env)  # fmt: skip
    report = (elsewhere / "run" / "report.md").read_text()
    assert "before" in report and "after" in report
    assert (elsewhere / "run" / "final" / "model.safetensors").is_file()
