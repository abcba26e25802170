"""The tiny model's K&K recipes end to end, shortened (`--task kk` and the varied-trace one): the shipped warm
start, evaluate, RL, evaluate, report; and the build path of any other warm start from an empty cache. The default
recipe (SmolLM2 on math) is tests/train/test_smollm2.py's."""

import json

import pytest

from lopti.cli import main
from lopti.commands.settings import RECIPES
from lopti.models import embedded
from lopti.tasks.kk.warmstart import WarmStartConfig


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe", [["--task", "kk"], ["--config", str(RECIPES / "kk-tiny-varied-cpu.yaml")]], ids=["kk", "varied"]
)
def test_a_shortened_recipe_loads_its_shipped_warm_start_trains_and_reports(tmp_path, monkeypatch, recipe):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["train", *recipe, "--max_steps", "4", "--save_steps", "2", "--train_puzzles", "64", "--eval_puzzles",
            "24", "--eval_samples", "2", "--report_to", "none", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert not any((tmp_path / "cache").glob("tiny-*")), "the shipped warm start is used, nothing is built"
    report = (out / "report.md").read_text()
    assert "| 3 | 24 |" in report and "| all | 24 |" in report and "Wall time" in report
    assert (out / "curves.png").is_file() and (out / "final" / "model.safetensors").is_file()
    before = json.loads((out / "eval_before.json").read_text())
    assert before["overall"]["n"] == 24 and before["overall"]["format_error"] < 0.1  # the warm start knows the format
    sampled = json.loads((out / "eval_before_sampled.json").read_text())
    assert sampled["overall"]["n"] == 24
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(row["step"] for row in rows) == 4
    first = next(row for row in rows if "reward" in row)
    assert first["reward"] > -3.0  # some completions are well formed: the paper's reward is above its floor
    assert sum(first[key] for key in first if key.startswith("probs/share_")) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_another_warm_start_is_built_from_an_empty_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig(puzzles_per_size=200, copies=1, answer_puzzles=100))
    argv = ["train", "--task", "kk", "--max_steps", "2", "--train_puzzles", "32", "--evaluate", "false",
            "--report_to", "none"]  # fmt: skip
    assert main([*argv, "--output_dir", str(tmp_path / "run")]) == 0
    cache = {p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")}
    tiny = f"tiny-{embedded.warm_start_key('tiny')}-v{embedded.BUILD_VERSION}"
    assert cache == {f"tiny-base-v{embedded.BUILD_VERSION}", tiny}
    assert embedded.damage(tmp_path / "cache" / tiny) is None
    stamp = (tmp_path / "cache" / tiny / "model.safetensors").stat().st_mtime_ns
    assert main([*argv, "--output_dir", str(tmp_path / "run2")]) == 0  # a second run reuses the cache
    assert (tmp_path / "cache" / tiny / "model.safetensors").stat().st_mtime_ns == stamp
