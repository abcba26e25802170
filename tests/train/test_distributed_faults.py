"""Faults in a real two-process launch (`accelerate launch --multi_gpu --num_processes 2`, gloo, on the CPU): a
process killed with SIGKILL mid-run, and Ctrl-C reaching the whole process group as a terminal sends it.

Each process's stderr is teed to its own file (`--log_dir`, `--tee 3`), so the tests read what each rank printed
apart from the launcher's own report (accelerate and torchrun end a failed launch with a ChildFailedError traceback
of their own, naming the rank and the signal; that is theirs, not lopti's).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# One two-process launch at a time under pytest-xdist: each uses both cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two-process-launch")]

# The embedded warm start at small sizes: 48 answer tokens let its immediate answers finish, so rewards differ
# within groups and most steps have a non-zero gradient (a resume that restores nothing would then show)
SETTINGS = {
    "evaluate": "false", "per_device_train_batch_size": "8", "num_generations": "4", "max_completion_length": "48",
    "max_steps": "12", "save_steps": "4", "report_to": "none", "disable_tqdm": "true",
}  # fmt: skip
LOPTI_LINES = ("stopped:", "error:", "interrupted", "ended by SIGTERM")


def launch(out: Path, logs: Path, port: str, resume: bool = False) -> subprocess.Popen:
    """Start a two-process `lopti train` into `out` (with `resume`, its continuation) in a session of its own,
    its processes meeting at `port`."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend", "no",
        "--log_dir", str(logs), "--tee", "3", "-m", "lopti.cli", "train", "--task", "kk", "--output_dir", str(out),
    ]  # fmt: skip
    command += ["--resume"] if resume else [word for key, value in SETTINGS.items() for word in (f"--{key}", value)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip


def wait_for_step(process: subprocess.Popen, out: Path, step: int) -> None:
    """Return once `out`'s metrics.jsonl has logged `step` (the run is then past its first checkpoint)."""
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= step):
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.2)


def rank_pids(launcher: subprocess.Popen) -> dict[int, int]:
    """Return {rank: pid} of the launcher's worker processes (its children with RANK in their environment)."""
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    ranks = {}
    for pid in map(int, children):
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next((entry[5:] for entry in environment if entry.startswith(b"RANK=")), None)
        if rank is not None:
            ranks[int(rank)] = pid
    return ranks


def stderr_of(logs: Path, rank: int) -> str:
    """Return what process `rank` wrote to stderr (the launcher tees it to <logs>/<run>/attempt_0/<rank>/)."""
    (path,) = logs.glob(f"*/attempt_*/{rank}/stderr.log")
    return path.read_text()


def lopti_lines(text: str) -> list[str]:
    """Return the lines of `text` that are lopti's one-line reports of a stop."""
    return [line for line in text.splitlines() if line.startswith(LOPTI_LINES)]


def train_rows(out: Path) -> list[dict]:
    """Return the training rows of `out`'s metrics.jsonl."""
    return [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in row]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, free_port) -> Path:
    """Return the folder of the two-process run trained start to end."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    launcher = launch(folder / "run", folder / "logs", free_port())
    _, stderr = launcher.communicate(timeout=600)
    assert launcher.returncode == 0, stderr[-3000:]
    rows = train_rows(folder / "run")
    assert [row["step"] for row in rows] == list(range(1, 13))
    assert sum(row["grad_norm"] > 0 for row in rows) >= 4, "the run must learn for equal weights to mean anything"
    return folder / "run"


@pytest.mark.parametrize("killed", [0, 1])
def test_a_killed_process_stops_the_other_with_one_line_and_the_run_resumes_to_the_same_weights(
    uninterrupted, tmp_path, free_port, killed
):
    out, logs = tmp_path / "run", tmp_path / "logs"
    launcher = launch(out, logs, free_port())
    wait_for_step(launcher, out, 6)
    os.kill(rank_pids(launcher)[killed], signal.SIGKILL)
    killed_at = time.monotonic()
    launcher.communicate(timeout=120)
    assert launcher.returncode != 0 and time.monotonic() - killed_at < 60

    survivor = stderr_of(logs, 1 - killed)
    assert "Traceback" not in survivor, survivor[-3000:]
    (line,) = lopti_lines(survivor)
    continuation = f"continue with: lopti train --resume --output_dir {out}"
    assert line.endswith(continuation) and line.startswith(("stopped: another process", "ended by SIGTERM")), line
    assert lopti_lines(stderr_of(logs, killed)) == []  # SIGKILL: the dead process wrote nothing

    resumed = launch(out, tmp_path / "logs-resumed", free_port(), resume=True)
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr[-3000:]
    weights = (out / "final" / "model.safetensors").read_bytes()
    assert weights == (uninterrupted / "final" / "model.safetensors").read_bytes()
    assert [row["step"] for row in train_rows(out)] == list(range(1, 13))


def test_ctrl_c_stops_both_processes_and_rank_0_alone_says_how_to_continue(tmp_path, free_port):
    out, logs = tmp_path / "run", tmp_path / "logs"
    launcher = launch(out, logs, free_port())
    wait_for_step(launcher, out, 6)
    os.killpg(launcher.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    for rank in (0, 1):
        assert "Traceback" not in stderr_of(logs, rank), stderr_of(logs, rank)[-3000:]
    assert lopti_lines(stderr_of(logs, 0)) == [f"interrupted; continue with: lopti train --resume --output_dir {out}"]
    assert lopti_lines(stderr_of(logs, 1)) == []
