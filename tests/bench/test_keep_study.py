"""bench/keep_study.py: a study's records without its weights, which `lopti compare` reads back as finished runs."""

import importlib
import json
from pathlib import Path

import pytest

from lopti.experiments.study import plan_runs

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def keep_study(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("keep_study")


def write(path: Path, text: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_records_are_kept_weights_are_not_and_a_kept_run_counts_as_finished(keep_study, tmp_path):
    study, kept = tmp_path / "study", tmp_path / "kept"
    base = {"max_steps": 2}
    write(study / "compare.json", json.dumps({"base": base, "variants": ["grpo"], "seeds": [0, 1]}))
    write(study / "threads.json")
    finished, interrupted = study / "runs" / "grpo-s0", study / "runs" / "grpo-s1"
    for name in ("run.json", "eval_before.json", "eval_after.json", "eval_after_sampled.json", "report.md",
                 "metrics.jsonl", "config.yaml", "final/model.safetensors", "checkpoint-2/optimizer.pt",
                 "tensorboard/events", ".lopti.lock", "curves.png"):  # fmt: skip
        write(finished / name)
    write(interrupted / "checkpoint-1" / "model.safetensors")
    write(interrupted / "metrics.jsonl")

    keep_study.keep(study, kept)

    files = {str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()}
    records = ("run.json", "eval_before.json", "eval_after.json", "eval_after_sampled.json", "report.md",
               "metrics.jsonl", "config.yaml")  # fmt: skip
    assert files == {"compare.json", "threads.json", "runs/grpo-s1/metrics.jsonl"} | {
        f"runs/grpo-s0/{name}" for name in records
    }
    left = plan_runs(kept, base, ["grpo"], [0, 1], threads=2)
    assert [job.label for job in left] == ["grpo-s1"]  # the kept run is skipped, the other trains from the start
    with pytest.raises(SystemExit, match=r"no compare\.json"):
        keep_study.keep(tmp_path / "nothing", kept)
