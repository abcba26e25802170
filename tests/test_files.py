"""One lopti process per folder: a second `lopti train` or `lopti eval` into a held folder stops with one
line, and the lock dies with its holder, however it ends."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import lopti
from lopti.cli import main
from lopti.files import folder_lock, write_atomic

HOLD = """
import sys
from lopti.files import folder_lock
with folder_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds the lock of a folder until it is killed; return (folder, process)."""
    folder = tmp_path / "held"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(lopti.__file__).parents[1])},
    )  # fmt: skip
    assert process.stdout.readline().strip() == "held"
    yield folder, process
    process.kill()
    process.wait()


def test_second_train_eval_or_compare_into_a_held_folder_stops_with_one_line(holder, tiny_model_dir, tmp_path, capsys):
    folder, process = holder
    recipe = tmp_path / "recipe.yaml"
    settings = dict(model=str(tiny_model_dir), task="kk", people="2", train_puzzles=8, eval_puzzles=1,
        num_generations=4, per_device_train_batch_size=4, max_completion_length=4, max_steps=1, use_cpu=True,
        bf16=False, report_to=[])  # fmt: skip
    recipe.write_text(yaml.safe_dump(settings))
    assert main(["train", "--config", str(recipe), "--output_dir", str(folder)]) == 2
    evaluate = ["eval", "--model", str(tiny_model_dir), "--task", "kk", "--people", "2", "--eval_puzzles", "1"]
    evaluate += ["--eval_max_new_tokens", "4"]
    assert main([*evaluate, "--out", str(folder)]) == 2
    assert main(["compare", "--config", str(recipe), "--variants", "grpo", "--seeds", "0", "--out", str(folder)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert all(f"{folder} is in use by another lopti process (pid {process.pid})" in line for line in lines)
    assert sorted(p.name for p in folder.iterdir()) == [".lopti.lock"]  # none of them wrote anything


def test_the_lock_dies_with_its_holder(holder):
    folder, process = holder
    with pytest.raises(ValueError, match="in use by another lopti process"), folder_lock(folder):
        pass
    process.send_signal(signal.SIGKILL)
    process.wait()
    with folder_lock(folder):  # no stale lock after a crash
        assert (folder / ".lopti.lock").read_text() == str(os.getpid())


def test_one_writer_within_a_process_too(tmp_path):
    """A second lock on a held folder fails at once even in the holder's process, and the folder is free after."""
    held = pytest.raises(ValueError, match=f"in use by another lopti process \\(pid {os.getpid()}\\)")
    with folder_lock(tmp_path / "run"), held, folder_lock(tmp_path / "run"):
        pass
    with folder_lock(tmp_path / "run"):
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lopti.lock"]


def test_a_file_in_the_way_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("")
    with (
        pytest.raises(ValueError, match="taken cannot be a folder: a file is in the way"),
        folder_lock(tmp_path / "taken"),
    ):
        pass


def test_write_atomic_replaces_whole_files_only(tmp_path):
    path = tmp_path / "run.json"
    write_atomic(path, "old")
    write_atomic(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_one_folder_guard_for_evaluations_comparisons_and_grids(tmp_path):
    from lopti.files import check_folder, claim_folder

    out = tmp_path / "study"
    identity = {"base": {"learning_rate": 1e-4}, "variants": ["grpo"], "seeds": [0]}
    assert check_folder(out, "compare.json", identity, "a comparison") is None  # a new folder: nothing to match
    claim_folder(out, "compare.json", identity, "a comparison", growable=("variants", "seeds"))
    # a later command may add variants and seeds; the record becomes the union
    claim_folder(out, "compare.json", identity | {"seeds": [1]}, "a comparison", growable=("variants", "seeds"))
    assert json.loads((out / "compare.json").read_text())["seeds"] == [0, 1]
    with pytest.raises(ValueError, match=r"holds a comparison with other settings \(base: .* there, .* now\)"):
        check_folder(out, "compare.json", identity | {"base": {"learning_rate": 3e-4}}, "a comparison")
    with pytest.raises(ValueError, match=r"\(seeds: \[0, 1\] there, \[0\] now\)"):  # not growable here
        check_folder(out, "compare.json", identity, "a comparison")
    # kept keys (results stored beside the identity) are not compared; normalise maps old keys first
    (out / "compare.json").write_text(json.dumps({"old": 1, "results": {"x": 1}}))
    assert check_folder(out, "compare.json", {"new": 1}, "a grid", kept=("results",), normalise=lambda d: {
        "new": d.pop("old"), **d})["new"] == 1  # fmt: skip
    (out / "compare.json").write_text("")
    with pytest.raises(ValueError, match=r"compare\.json is empty or damaged"):
        check_folder(out, "compare.json", identity, "a comparison")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"{other} is not empty and holds no lopti evaluation"):
        claim_folder(other, "settings.json", {}, "an evaluation")
    claim_folder(other, "settings.json", {}, "an evaluation", allowed={"notes.txt"})  # entries allowed to be there
    assert json.loads((other / "settings.json").read_text()) == {}
