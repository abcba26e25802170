"""`lopti compare --jobs 2` killed with SIGKILL mid-study, then run again: every run is trained exactly once (a
finished run is skipped, an interrupted one resumes from its last checkpoint), no worker outlives the command, and
results.md is the one an uninterrupted study writes."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from lopti.run_folder import run_outputs

RUNS = ["grpo-s0", "grpo-s1", "grpo-s2"]

# The command, with a reward that varies on the tiny model's text (its K&K rewards would all be 0). The spawned
# workers run this file's top level too (as `__mp_main__`), so they train with the same reward.
DRIVER = """
    import sys

    from lopti.commands import train_run


    def hash_reward(completions, completion_ids, **kwargs):
        return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


    train_run.task_rewards = lambda task, run, weights, tokenizer=None: ([hash_reward], [1.0])
    if __name__ == "__main__":
        from lopti.cli import main

        sys.exit(main(sys.argv[1:]))
"""


def compare(folder: Path) -> subprocess.Popen:
    """Start the study in `folder` (its results in `folder`/study), its output in `folder`/out.txt."""
    folder.mkdir(exist_ok=True)
    argv = ["compare", "--config", "../base.yaml", "--variants", "grpo", "--seeds", "0,1,2", "--jobs", "2"]
    output = (folder / "out.txt").open("a")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "../driver.py", *argv, "--threads", "1", "--out", "study"]
    return subprocess.Popen(command, cwd=folder, stdout=output, stderr=subprocess.STDOUT, env=environment)


def is_finished(run_dir: Path) -> bool:
    """Whether `run_dir` holds every output of a finished run, as `lopti compare` decides it (final/ alone is not
    enough: a worker killed after saving final/ and before its last evaluation has not finished)."""
    return all((run_dir / output).is_file() for output in run_outputs(evaluate=True))


def steps(run_dir: Path) -> list[int]:
    """Return the steps `run_dir`'s metrics.jsonl logged; none for a run killed before its first log line."""
    metrics = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.exists() else []


@pytest.mark.slow  # 6 tiny runs, each worker imports TRL: 18 min on 2 cores shared with other training
def test_a_study_killed_mid_way_finishes_each_run_once_with_the_same_results(tiny_model_dir, tmp_path):
    settings = dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="2-3", train_puzzles=8, eval_puzzles=2,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=8, max_steps=6,
        save_strategy="steps", save_steps=1, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e-2, disable_tqdm=True, eval_max_new_tokens=4,
    )  # fmt: skip
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(settings))
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    assert compare(tmp_path / "whole").wait(timeout=900) == 0

    cut = tmp_path / "cut"
    study = compare(cut)
    deadline = time.monotonic() + 600
    while ": done" not in (cut / "out.txt").read_text():  # one run finished, the next one under way
        assert study.poll() is None and time.monotonic() < deadline, (cut / "out.txt").read_text()
        time.sleep(0.2)
    study.send_signal(signal.SIGKILL)
    study.wait()
    time.sleep(5)  # the workers' time to notice
    finished = [run for run in RUNS if is_finished(cut / "study" / "runs" / run)]
    unfinished = [run for run in RUNS if run not in finished]
    assert finished and unfinished
    trained = {run: steps(cut / "study" / "runs" / run) for run in RUNS if (cut / "study" / "runs" / run).is_dir()}
    time.sleep(2)
    assert trained == {run: steps(cut / "study" / "runs" / run) for run in trained}  # no worker trains on
    kept = {run: (cut / "study" / "runs" / run / "final" / "model.safetensors").stat().st_mtime_ns for run in finished}

    assert compare(cut).wait(timeout=900) == 0
    printed = (cut / "out.txt").read_text()
    assert all(f"{run}: finished, skipped" in printed for run in finished)
    for run in RUNS:
        one, two = tmp_path / "whole" / "study" / "runs" / run, cut / "study" / "runs" / run
        assert steps(two) == steps(one), run  # every step logged once: none trained twice
        assert (two / "final" / "model.safetensors").read_bytes() == (one / "final" / "model.safetensors").read_bytes()
    assert kept == {
        run: (cut / "study" / "runs" / run / "final" / "model.safetensors").stat().st_mtime_ns for run in finished
    }
    assert (cut / "study" / "results.md").read_text() == (tmp_path / "whole" / "study" / "results.md").read_text()
