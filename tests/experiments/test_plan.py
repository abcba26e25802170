"""`lopti compare --register`: the plan is written with its hash before any run, results.md cites it, and a
registered study whose plan changed is refused in one line (exit 2)."""

import hashlib
import json
from pathlib import Path

import pytest

from lopti.cli import main
from lopti.experiments import compare

VARIANTS = ["--variants", "grpo,lopti,grpo2", "--seeds", "0,1,2"]


def finish_run(settings):
    """Stand in for training: write a finished run whose greedy accuracy rises with the seed (lopti by 5 points)."""
    run_dir = Path(settings["output_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    split_by_probability = settings["lopti"] and settings.get("lopti_split", "probability") == "probability"
    accuracy = 0.3 + 0.01 * settings["seed"] + (0.05 if split_by_probability else 0.0)
    after = {"group": "people", "per_group": {}, "overall": {"accuracy": accuracy, "n": 900}}
    before = {"group": "people", "per_group": {}, "overall": {"accuracy": 0.2, "n": 900}}
    for name, record in (("run.json", {}), ("eval_before.json", before), ("eval_after.json", after)):
        (run_dir / name).write_text(json.dumps(record))
    (run_dir / "report.md").write_text("report")


@pytest.fixture
def registered(tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["compare", *VARIANTS, "--primary", "lopti:grpo2,lopti:grpo", "--out", str(out)]
    assert main([*argv, "--register"]) == 0
    return out, argv, capsys.readouterr().out


def test_register_writes_the_plan_and_its_hash_before_any_run(registered):
    out, _, printed = registered
    record = json.loads((out / "plan.json").read_text())
    canonical = json.dumps(record["plan"], sort_keys=True, separators=(",", ":")).encode()
    assert record["hash"] == hashlib.sha256(canonical).hexdigest()
    assert f"Registered plan {record['hash']}" in printed
    plan = record["plan"]
    assert (plan["variants"], plan["seeds"]) == (["grpo", "lopti", "grpo2"], [0, 1, 2])
    assert plan["primary_comparisons"] == ["lopti:grpo2", "lopti:grpo"] and plan["primary_metric"] == "greedy"
    assert plan["alpha"] == 0.05 and plan["correction"] == "Holm over the primary comparisons"
    assert plan["data"]["eval_puzzles"] == plan["recipe"]["eval_puzzles"] and "data_seed" in plan["data"]
    assert "sign-flip" in plan["test"] and "collapse" in plan and "exclusion" in plan
    assert sorted(p.name for p in out.iterdir()) == [".lopti.lock", "plan.json"]  # no run yet


def test_the_registered_study_runs_and_its_results_cite_the_hash(registered, monkeypatch):
    out, argv, _ = registered
    monkeypatch.setattr(compare, "train_settings", finish_run)
    assert main(argv) == 0
    digest = json.loads((out / "plan.json").read_text())["hash"]
    text = (out / "results.md").read_text()
    assert f"Registered plan `{digest}` (plan.json)" in text
    primary = text.split("Primary comparisons, greedy accuracy")[1]
    # lopti − grpo2 and lopti − grpo: +5 points on each of 3 seeds, p = 2/8 each, Holm: both 0.5; over the seeds
    # the interval is the point, over 900 problems too it is about ±2 · √(2 · 0.35 · 0.65 / 900) = ±4.5 wide
    lopti = primary.split("| lopti − grpo2 | 3 | +5.0 | [+5.0, +5.0] | [")[1]
    low, high = (float(x) for x in lopti.split("]")[0].split(", "))
    assert low == pytest.approx(0.5, abs=0.8) and high == pytest.approx(9.5, abs=0.8)
    assert "| 0.250 | 0.500 | 3 / 0 / 0 |" in lopti.splitlines()[0]
    # each variant's accuracy carries the 900 problems' sampling error: lopti at 35-37%, about ±2 · 1.6 points
    ablation = text.split("| variant | seeds | greedy |")[1]
    lopti_row = next(line for line in ablation.splitlines() if line.startswith("| lopti |"))
    low, high = (float(x) for x in lopti_row.split("36.0 [")[1].split("]")[0].split(", "))
    assert high - low == pytest.approx(2 * 1.96 * 100 * (0.36 * 0.64 / 900) ** 0.5, rel=0.25)
    assert main(argv) == 0  # the same plan again: finished runs skipped, nothing refused


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (["--seeds", "0,1,2,3"], "seeds"),
        (["--learning_rate", "0.5"], "recipe (learning_rate)"),
        (["--primary_metric", "pass@k"], "primary_metric"),
        (["--eval_puzzles", "10"], "data, recipe (eval_puzzles)"),
    ],
)
def test_a_changed_plan_is_refused_in_one_line(registered, monkeypatch, capsys, change, says):
    out, argv, _ = registered
    monkeypatch.setattr(compare, "train_settings", finish_run)
    assert main([*argv, *change]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"holds a study registered with plan {json.loads((out / 'plan.json').read_text())['hash'][:12]}" in error
    assert f"these settings change its {says}; a registered plan cannot change" in error
    assert not (out / "runs").exists()


def test_a_hand_edited_plan_is_refused(registered, capsys):
    out, argv, _ = registered
    record = json.loads((out / "plan.json").read_text())
    record["plan"]["alpha"] = 0.1
    (out / "plan.json").write_text(json.dumps(record))
    assert main(argv) == 2
    assert "plan.json is damaged or was edited by hand" in capsys.readouterr().err


def test_a_study_with_runs_cannot_be_registered_afterwards(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare, "train_settings", finish_run)
    out = tmp_path / "study"
    assert main(["compare", *VARIANTS, "--out", str(out)]) == 0
    assert main(["compare", *VARIANTS, "--out", str(out), "--register"]) == 2
    assert "already holds runs; a plan is registered before any run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("primary", "says"),
    [("lopti", "expected VARIANT:BASE"), ("lopti:ar", "ar is not among --variants"), ("grpo:grpo", "two different")],
)
def test_bad_primary_comparisons_are_one_line(tmp_path, capsys, primary, says):
    argv = ["compare", *VARIANTS, "--primary", primary, "--out", str(tmp_path / "s"), "--register"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert says in error and len(error.splitlines()) == 1


def test_a_grid_is_not_registered_as_a_whole(tmp_path, capsys):
    argv = ["compare", *VARIANTS, "--grid", "learning_rate=1e-4,1e-3", "--out", str(tmp_path / "g"), "--register"]
    assert main(argv) == 2
    assert "--register: register each grid point's study on its own" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_a_value_read_as_a_float_is_the_registered_integer(registered, monkeypatch):
    """TRL types save_steps and logging_steps as floats, so a recipe's 8 reaches the plan as 8.0: the same value,
    though its JSON, and so its hash, differ. The study continues; a changed value is still refused."""
    out, argv, _ = registered
    path = out / "plan.json"
    record = json.loads(path.read_text())
    record["plan"]["recipe"]["logging_steps"] = int(record["plan"]["recipe"]["logging_steps"])
    digest = hashlib.sha256(json.dumps(record["plan"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    path.write_text(json.dumps({"plan": record["plan"], "hash": digest}))
    monkeypatch.setattr(compare, "train_settings", finish_run)
    assert main(argv) == 0
    assert main([*argv, "--logging_steps", "2"]) == 2


@pytest.mark.parametrize(
    ("study", "config", "settings"),
    [
        ("study-default", "math-smollm2-ar-cpu", {"eval_puzzles": 500, "eval_sampled_prompts": 200}),
        ("study-varied-split", "kk-tiny-varied-cpu", {}),
    ],
)
def test_the_registered_studies_continue_with_the_commands_the_results_page_gives(study, config, settings):
    """docs/results.md's command of each registered study passes its plan check, so it continues the study."""
    from lopti.experiments.plan import check_registered, study_plan
    from lopti.experiments.study import study_base

    root = Path(__file__).parents[2]
    registered = json.loads((root / "results" / study / "plan.json").read_text())
    plan = registered["plan"]
    page = " ".join((root / "docs/results.md").read_text().split()).replace("\\ ", "")
    flags = " ".join(f"--{key} {value}" for key, value in settings.items())
    command = f"lopti compare --config configs/{config}.yaml --variants {','.join(plan['variants'])} " + (
        f"{flags} " if flags else ""
    )
    assert command + f"--seeds {','.join(map(str, plan['seeds']))}" in page
    base = study_base(root / "configs" / f"{config}.yaml", settings, plan["variants"])
    primary = plan["primary_comparisons"]
    now = study_plan(base, plan["variants"], plan["seeds"], primary, plan["primary_metric"], plan["alpha"])
    assert check_registered(root / "results" / study, now) == registered["hash"]
