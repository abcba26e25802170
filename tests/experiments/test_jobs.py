"""A study's runs through each executor (local processes, Ray): every run dispatched once, a failed run resumed
where it stopped by the next command, finished runs never run again, and no worker left behind.

The run function is a stand-in for training (a few file writes), module-level so the workers import it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lopti.commands.settings import default_recipe
from lopti.errors import TrainingStopped
from lopti.experiments import compare, study
from lopti.experiments.jobs import Job, run_jobs
from lopti.experiments.study import run_name

SEEDS = [0, 1, 2]
CHECKPOINT = "checkpoint-1"  # stands for a complete checkpoint (see `checkpoints_by_marker`)


def interrupted_once(settings):
    """Record the call in the run folder; seed 1's first call leaves a checkpoint and fails, the others finish."""
    run_dir = Path(settings["output_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps({"resume": settings["resume"], "threads": _torch_threads()}) + "\n")
    if settings["seed"] == 1 and not settings["resume"]:
        (run_dir / CHECKPOINT).mkdir()
        raise RuntimeError("stopped half way")
    evaluation = {"group": "people", "per_group": {"3": {"accuracy": 0.5}}, "overall": {"accuracy": 0.5, "n": 9}}
    for name in ("run.json", "eval_before.json", "eval_after.json"):
        (run_dir / name).write_text(json.dumps(evaluation))
    (run_dir / "report.md").write_text("report")
    print(f"trained {run_dir.name}")


def _torch_threads():
    import torch

    return torch.get_num_threads()


@pytest.fixture
def checkpoints_by_marker(monkeypatch):
    """Planning sees a run's stand-in checkpoint as a complete one."""

    def marked(run_dir, **_):
        return run_dir / CHECKPOINT if (run_dir / CHECKPOINT).is_dir() else None

    monkeypatch.setattr(study, "last_complete_checkpoint", marked)


@pytest.fixture
def ray_session():
    """Ray, an optional backend (in the dev, ray and verl extras); the study starts a local one, ended here."""
    import ray

    yield
    ray.shutdown()


def calls(out, name):
    return [json.loads(line) for line in (out / "runs" / name / "calls.jsonl").read_text().splitlines()]


def run_study_three_times(out, backend):
    """Run the study, which fails on seed 1; again, which resumes it; and again, which trains nothing."""
    arguments = (default_recipe("kk"), {}, ["grpo"], SEEDS, out, 2, 1, interrupted_once, backend)
    with pytest.raises(TrainingStopped, match=r"1 of 3 runs failed: grpo-s1 \(RuntimeError: stopped half way\)"):
        compare.run_all(*arguments)
    assert calls(out, "grpo-s1") == [{"resume": False, "threads": 1}]
    compare.run_all(*arguments)
    compare.run_all(*arguments)
    assert calls(out, "grpo-s0") == calls(out, "grpo-s2") == [{"resume": False, "threads": 1}]
    assert calls(out, "grpo-s1") == [{"resume": False, "threads": 1}, {"resume": True, "threads": 1}]
    assert "trained grpo-s1" in (out / "runs" / "grpo-s1" / "train.log").read_text()  # a run's output in its log
    assert "RuntimeError: stopped half way" in (out / "runs" / "grpo-s1" / "train.log").read_text()


def test_local_workers_run_each_run_once_and_resume_the_stopped_one(tmp_path, checkpoints_by_marker):
    run_study_three_times(tmp_path / "study", "local")


def test_ray_tasks_run_each_run_once_and_resume_the_stopped_one(tmp_path, checkpoints_by_marker, ray_session):
    run_study_three_times(tmp_path / "study", "ray")


def test_an_unknown_backend_is_one_line(tmp_path):
    job = Job(run_name("grpo", 0), {"output_dir": str(tmp_path)}, 1, tmp_path / "train.log")
    with pytest.raises(ValueError, match="--backend spark: expected one of local, ray"):
        run_jobs([job], 2, interrupted_once, "spark")


SLEEPER = """
import os
import sys
import time
from pathlib import Path

from lopti.experiments.jobs import Job, run_jobs


def sleep_long(settings):
    Path(settings["output_dir"], "pid").write_text(str(os.getpid()))
    time.sleep(120)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    runs = [folder / f"run{i}" for i in (0, 1)]
    jobs = [Job(run.name, {"output_dir": str(run)}, 1, run / "train.log") for run in runs]
    run_jobs(jobs, 2, sleep_long)
"""


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0  # a zombie has ended


def test_no_local_worker_outlives_a_killed_command(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    command = subprocess.Popen([sys.executable, str(tmp_path / "sleeper.py"), str(tmp_path)], env=environment)
    pid_files = [tmp_path / f"run{i}" / "pid" for i in (0, 1)]
    deadline = time.time() + 120
    while not all(path.exists() and path.read_text() for path in pid_files):
        assert time.time() < deadline and command.poll() is None, "the workers did not start"
        time.sleep(0.2)
    workers = [int(path.read_text()) for path in pid_files]
    assert all(alive(pid) for pid in workers)
    command.send_signal(signal.SIGKILL)  # runs no code of the command: only the workers' watch can end them
    command.wait()
    deadline = time.time() + 30
    while any(alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)
