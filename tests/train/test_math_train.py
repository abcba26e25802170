"""`lopti train --task math` and `lopti data math` end to end on a tiny model."""

import json
from pathlib import Path

import pytest
import yaml

from lopti.cli import main
from lopti.commands.settings import RunConfig
from lopti.commands.train_run import task_rewards
from lopti.cpu.precision import native_bf16
from lopti.tasks.math.data import load_math_rows
from lopti.tasks.registry import get_task

RECIPES = Path(__file__).resolve().parents[2] / "lopti" / "configs"


def test_train_task_math_uses_the_math_recipe_and_rewards(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--task", "math", "--model", str(tiny_model_dir), "--levels", "1,3", "--train_puzzles", "8",
            "--eval_puzzles", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
            "--max_completion_length", "8", "--max_steps", "2", "--eval_max_new_tokens", "4",
            "--disable_tqdm", "true", "--report_to", "none", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["task"] == "math" and config["template"] == "chat-example"  # the form SmolLM2 answers in
    recipe = yaml.safe_load((RECIPES / "math-smollm2-ar-cpu.yaml").read_text())
    assert config["ar_alpha"] == 0.1 and config["lopti"] is False  # AR alone: the paper's choice for math
    assert config["learning_rate"] == recipe["learning_rate"] and config["bf16"] is native_bf16()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/math/mean" in m for m in metrics)
    after = json.loads((out / "eval_after.json").read_text())
    assert after["group"] == "level" and set(after["per_group"]) == {"1", "3"}
    assert (out / "report.md").is_file() and (out / "final" / "config.json").is_file()


def test_math_rewards_log_accuracy_and_reject_kk_names():
    funcs, weights = task_rewards(get_task("math"), RunConfig(task="math", rewards=["math_format"]), None)
    assert [f.__name__ for f in funcs] == ["math_format", "math"] and weights == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"unknown math reward\(s\) partial; choose from math, math_format"):
        task_rewards(get_task("math"), RunConfig(task="math", rewards=["partial"]), None)


def test_the_task_s_own_template_is_the_default():
    held_out = get_task("math").rows(RunConfig(task="math", train_puzzles=1, eval_puzzles=1))[1]
    assert held_out[0]["prompt"][0]["role"] == "user"  # chat messages: math's `chat` template, not kk's
    assert get_task("math").prompt_template(RunConfig(task="math")) == "chat"
    assert get_task("kk").prompt_template(RunConfig(task="kk")) == "chatml-think"


def test_data_math_cli_writes_loadable_identical_files(tmp_path, capsys):
    for name in ("a", "b"):
        argv = ["data", "math", "--levels", "2-4", "--train_puzzles", "6", "--eval_puzzles", "2", "--data_seed", "5"]
        assert main([*argv, "--out", str(tmp_path / name)]) == 0
    for file in ("train.jsonl", "test.jsonl", "train.parquet"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    rows = load_math_rows(tmp_path / "a" / "train.parquet")
    assert len(rows) == 18 and {r["level"] for r in rows} == {2, 3, 4}
    assert main(["data", "math", "--levels", "6", "--out", str(tmp_path / "c")]) == 2
    assert "math level must be one of 1, 2, 3, 4, 5" in capsys.readouterr().err


def test_train_unknown_task_is_one_line(capsys):
    assert main(["train", "--task", "chess"]) == 2
    assert "unknown task 'chess'; choose one of kk, math" in capsys.readouterr().err
