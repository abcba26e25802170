"""The embedded default end to end, shortened: build tiny-base, warm start, evaluate, RL, evaluate, report.

Everything `lopti train` does with no arguments, from an empty cache, with a smaller warm start, fewer RL
steps and a smaller held-out set so it runs in about a minute.
"""

import json

import pytest

from lopti.cli import main
from lopti.models import embedded
from lopti.models.warmstart import WarmStartConfig


@pytest.mark.slow
def test_shortened_default_from_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig(puzzles_per_size=600))
    out = tmp_path / "run"
    argv = ["train", "--max_steps", "4", "--save_steps", "2", "--train_puzzles", "64", "--eval_puzzles", "20",
            "--report_to", "[]", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    cache = {p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")}
    tiny = f"tiny-{embedded.warm_start_key()}-v{embedded.BUILD_VERSION}"
    assert cache == {f"tiny-base-v{embedded.BUILD_VERSION}", tiny}
    assert embedded.damage(tmp_path / "cache" / tiny) is None
    report = (out / "report.md").read_text()
    assert "| 3 | 20 |" in report and "| 4 | 20 |" in report and "| all | 40 |" in report and "Wall time" in report
    assert (out / "curves.png").is_file() and (out / "final" / "model.safetensors").is_file()
    before = json.loads((out / "eval_before.json").read_text())
    assert before["overall"]["n"] == 40 and before["overall"]["format_error"] < 0.5  # the warm start taught the format
    assert json.loads((out / "eval_after.json").read_text())["overall"]["n"] == 40
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 4
    # a second run reuses the cache: nothing is rebuilt
    stamp = (tmp_path / "cache" / tiny / "model.safetensors").stat().st_mtime_ns
    assert main([*argv[:-1], str(tmp_path / "run2")]) == 0
    assert (tmp_path / "cache" / tiny / "model.safetensors").stat().st_mtime_ns == stamp
