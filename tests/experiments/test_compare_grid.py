"""`lopti compare --grid`: parsing, layout, reuse of plain comparisons, refusal, resuming and the summary."""

import json
from pathlib import Path

import pytest

from lopti.cli import main
from lopti.experiments import compare
from lopti.experiments import grid as grid_command
from lopti.experiments.compare_report import curve_panels, write_compare_report
from lopti.experiments.compare_training import quality_paired_table, shares_table, training_table
from lopti.experiments.grid import parse_grid, write_grid_summary


def evaluation(accuracy, format_error=0.0):
    return {
        "group": "people",
        "per_group": {"3": {"accuracy": accuracy}},
        "overall": {"accuracy": accuracy, "format_error": format_error},
    }


def fake_training(settings):
    """Write the outputs of a finished run, its accuracy made from the learning rate and the seed."""
    run_dir = Path(settings["output_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "rewards/logic_rl/mean": 0.5}) + "\n")
    (run_dir / "run.json").write_text("{}")
    (run_dir / "eval_before.json").write_text(json.dumps(evaluation(0.0)))
    after = evaluation(settings["learning_rate"] * 100 + settings["seed"] / 100)
    (run_dir / "eval_after.json").write_text(json.dumps(after))
    (run_dir / "report.md").write_text("report")


def test_parse_grid_checks_keys_and_values_as_lopti_train_does():
    assert parse_grid("learning_rate=1e-4, 3e-4; temperature=0.7,1", {}) == {
        "learning_rate": ["1e-4", "3e-4"],
        "temperature": ["0.7", "1"],
    }
    problems = {
        "learning_rte=1e-4": "--grid: unknown key(s) 'learning_rte' (did you mean learning_rate",
        "learning_rate=1e-4,abc": "--grid learning_rate: learning_rate must be a number, got 'abc'",
        "learning_rate=1e-4,-1": "--grid learning_rate: learning_rate must be ≥ 0, got -1",
        "learning_rate=1e-4,0.0001": "--grid learning_rate: 1e-4, 0.0001 are the same value",
        "seed=1,2": "--grid seed: set by each variant or by compare",
        "learning_rate": "--grid 'learning_rate': expected KEY=V1,V2,...",
        "max_steps=4,": "--grid max_steps: empty value in '4,'",
    }
    for text, says in problems.items():
        with pytest.raises(ValueError) as error:
            parse_grid(text, {})
        assert says in str(error.value), (text, str(error.value))
    with pytest.raises(ValueError, match="--grid learning_rate: also given as --learning_rate"):
        parse_grid("learning_rate=1e-4", {"learning_rate": 0.1})


def test_grid_layout_reuses_plain_comparisons_resumes_and_refuses(tmp_path, monkeypatch, capsys):
    trained = []

    def record(settings):
        trained.append(settings["output_dir"])
        fake_training(settings)

    monkeypatch.setattr(compare, "train_settings", record)  # a plain comparison's runner
    monkeypatch.setattr(grid_command, "train_settings", record)  # a grid's
    out = tmp_path / "sweep"
    common = ["compare", "--variants", "grpo,ar", "--seeds", "0,1", "--max_steps", "4"]
    # a point made by a plain comparison first
    assert main([*common, "--learning_rate", "3e-4", "--out", str(out / "learning_rate=3e-4")]) == 0
    assert len(trained) == 4
    trained.clear()
    grid = [*common, "--grid", "learning_rate=1e-4,3e-4", "--out", str(out)]
    assert main(grid) == 0
    assert sorted(Path(p).relative_to(out).as_posix() for p in trained) == [
        f"learning_rate=1e-4/runs/{run}" for run in ("ar-s0", "ar-s1", "grpo-s0", "grpo-s1")
    ]
    point = out / "learning_rate=1e-4"
    assert json.loads((point / "compare.json").read_text())["base"]["learning_rate"] == 1e-4
    assert (point / "results.md").is_file() and (point / "curves.png").is_file()
    expected = f"lopti compare {' '.join(common[1:])} --learning_rate 1e-4 --out {point}"
    assert (point / "command.txt").read_text().strip() == expected
    stored = json.loads((out / "grid.json").read_text())
    assert (stored["grid"], stored["variants"], stored["seeds"]) == (
        {"learning_rate": ["1e-4", "3e-4"]},
        ["grpo", "ar"],
        [0, 1],
    )
    assert stored["results"]["points"]["learning_rate=3e-4"]["variants"]["ar"]["accuracy"][0] == pytest.approx(0.035)
    assert "| grpo | 1.5 ± 0.7 (0/2 collapsed) | 3.5 ± 0.7 (0/2 collapsed) |" in (out / "grid.md").read_text()
    assert (out / "grid.png").stat().st_size > 1000

    # rerun: nothing left to train; a run that lost its evaluation is redone alone
    trained.clear()
    assert main(grid) == 0 and trained == []
    (point / "runs" / "ar-s1" / "eval_after.json").unlink()
    assert main(grid) == 0
    assert trained == [str(point / "runs" / "ar-s1")]
    assert "learning_rate=1e-4/grpo-s0: finished, skipped" in capsys.readouterr().out

    # another grid in the same folder is refused, and so is a grid over a plain comparison
    assert main([*common, "--grid", "learning_rate=1e-4,1e-3", "--out", str(out)]) == 2
    refused = "holds a grid with other settings (grid: {'learning_rate': ['1e-4', '3e-4']} there"
    assert refused in capsys.readouterr().err
    assert main([*grid[:-1], str(point)]) == 2
    assert "is not empty and holds no lopti grid" in capsys.readouterr().err


def test_grid_summary_means_std_and_collapsed_share(tmp_path):
    identity = {
        "base": {},
        "grid": {"learning_rate": ["1e-4", "1e-3"]},
        "variants": ["grpo", "lopti"],
        "seeds": [0, 1, 2],
    }
    (tmp_path / "grid.json").write_text(json.dumps(identity))
    runs = {  # warm start 25%; collapsed: below it, or format errors above 5% (exactly 5% is not)
        "grpo-s0": ("grpo", 0.20, 0.0),
        "grpo-s1": ("grpo", 0.40, 0.06),
        "grpo-s2": ("grpo", 0.30, 0.05),
        "lopti-s0": ("lopti", 0.30, 0.0),
    }
    point = tmp_path / "learning_rate=1e-3"
    point.mkdir()
    fabricated = {
        name: {"variant": v, "before": evaluation(0.25), "after": evaluation(a, f)} for name, (v, a, f) in runs.items()
    }
    (point / "results.json").write_text(json.dumps({"runs": fabricated}))
    table = write_grid_summary(tmp_path, "lopti compare --grid learning_rate=1e-4,1e-3")
    results = json.loads((tmp_path / "grid.json").read_text())["results"]["points"]
    assert list(results) == ["learning_rate=1e-3"]
    grpo, lopti = results["learning_rate=1e-3"]["variants"]["grpo"], results["learning_rate=1e-3"]["variants"]["lopti"]
    assert grpo["accuracy"] == pytest.approx([0.3, 0.1])  # sample std of 0.2, 0.4, 0.3
    assert grpo["collapsed"] == pytest.approx(2 / 3) and grpo["collapsed_runs"] == ["grpo-s0", "grpo-s1"]
    assert (lopti["seeds"], lopti["accuracy"], lopti["collapsed"]) == (1, [0.3, 0.0], 0.0)
    assert (
        "| grpo | – | 30.0 ± 10.0 (2/3 collapsed) |" in table and "| lopti | – | 30.0 ± 0.0 (0/1 collapsed) |" in table
    )
    assert (tmp_path / "grid.png").stat().st_size > 1000
    assert json.loads((tmp_path / "grid.json").read_text())["grid"] == identity["grid"]  # the identity stays


def test_curves_gain_update_quality_panels_only_when_logged(tmp_path):
    rewards = {"rewards/logic_rl/mean", "loss"}
    assert curve_panels(rewards) == [{"logic_rl": "rewards/logic_rl/mean"}]
    logged = rewards | {
        "quality/correct_pos_[0.00,0.50)",
        "quality/correct_pos_all",
        "quality/dlogp_neg_all",
        "quality/phase1/correct_pos_all",
    }
    assert curve_panels(logged)[1:] == [
        {"correct_pos [0.00,0.50)": "quality/correct_pos_[0.00,0.50)", "correct_pos all": "quality/correct_pos_all"},
        {"dlogp_neg all": "quality/dlogp_neg_all"},
    ]
    run_dir = tmp_path / "runs" / "lopti-s0"
    run_dir.mkdir(parents=True)
    lines = [{"step": 2 * s, "rewards/logic_rl/mean": s / 4, "quality/correct_pos_all": 0.5 + s / 10} for s in range(4)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    results = {
        "runs": {"lopti-s0": {"variant": "lopti", "seed": 0, "before": evaluation(0.1), "after": evaluation(0.3)}},
        "summary": {"lopti": {"seeds": 1, "all": [0.3, 0], "before": [0.1, 0]}},
        "group": "people",
    }
    write_compare_report(tmp_path, results, "lopti compare", {"max_steps": 8, "task": "kk"})
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_training_table_shows_first_and_last_batches_and_mean_quality(tmp_path):
    """Rewards of the first and last batches and the run's mean correct ratios, mean ± std over seeds."""
    for seed, offset in ((0, 0.0), (1, 0.2)):
        run_dir = tmp_path / "runs" / f"grpo-s{seed}"
        run_dir.mkdir(parents=True)
        lines = [
            {"step": s, "reward": offset + s / 10, "quality/correct_pos_all": 0.6, "quality/correct_neg_all": offset}
            for s in range(1, 11)
        ]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "runs" / "ar-s0").mkdir()
    (tmp_path / "runs" / "ar-s0" / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    results = {
        "runs": {"grpo-s0": {"variant": "grpo"}, "grpo-s1": {"variant": "grpo"}, "ar-s0": {"variant": "ar"}},
        "summary": {"grpo": {}, "ar": {}},
    }
    rows = training_table(tmp_path, results, window=2).splitlines()
    # grpo: first two batches 0.15 and 0.35 (mean 0.25, std 0.141), last two 0.95 and 1.15 (mean 1.05)
    assert rows[2] == "| grpo | 0.250 ± 0.141 | 1.050 ± 0.141 | 0.600 ± 0.000 | 0.100 ± 0.141 |"
    assert rows[3] == "| ar | 0.500 ± 0.000 | 0.500 ± 0.000 | – | – |"


def test_training_tables_give_the_top_buckets_correct_ratio_and_the_shares_first_and_last(tmp_path):
    """The top π_old bucket's mean correct ratio (the probe's number) and each bucket's share of the first and
    last generated batches; a Lopti run's batch is two optimizer steps."""
    labels = ["[0.00,0.50)", "[0.50,1.00]"]
    for name, passes, top in (("grpo-s0", 1, 0.5), ("grpo-s1", 1, 0.7), ("lopti-s0", 2, 0.4)):
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        lines = []
        for batch in (1, 2, 3):
            step = passes * batch
            low = 0.1 * batch  # the low bucket's share grows 10, 20, 30%
            shares = {f"probs/share_{labels[0]}": low, f"probs/share_{labels[1]}": 1 - low}
            quality = {f"quality/correct_pos_{labels[1]}": top, "quality/correct_pos_all": 0.6}
            lines.append({"step": step, "reward": 0.5, **shares, **quality})
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    results = {
        "runs": {name: {"variant": name.split("-")[0]} for name in ("grpo-s0", "grpo-s1", "lopti-s0")},
        "summary": {"grpo": {}, "lopti": {}},
    }
    training = training_table(tmp_path, results, window=1).splitlines()
    assert training[0].endswith("| correct ratio Â>0, π_old in [0.50,1.00] (mean) |")
    assert training[2].endswith("| 0.600 ± 0.141 |") and training[3].endswith("| 0.400 ± 0.000 |")
    shares = shares_table(tmp_path, results).splitlines()
    assert shares[0] == "| variant | π_old in [0.00,0.50) | π_old in [0.50,1.00] |"
    assert shares[2:] == ["| grpo | 10.0 → 30.0 | 90.0 → 70.0 |", "| lopti | 10.0 → 30.0 | 90.0 → 70.0 |"]
    assert shares_table(tmp_path, {"runs": {}, "summary": {}}) is None


def test_quality_paired_table_differences_each_seeds_run_mean_from_grpos(tmp_path):
    """AR's mean correct ratios minus GRPO's on the same seed, with the interval and p over the seeds; a Lopti run's
    batch is two optimizer steps; a study without the base, or without update quality, has no table."""
    top_label = "[0.50,1.00]"

    def write(name, passes, tops):
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        lines = [
            {"step": passes * batch, f"quality/correct_pos_{top_label}": top, "quality/correct_pos_all": 0.6}
            for batch, top in enumerate(tops, start=1)
        ]
        lines.append({"step": passes * len(tops), "reward": 0.5})  # a log without quality counts for nothing
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    runs = {}
    for seed, grpo_top in enumerate((0.5, 0.7, 0.6)):
        write(f"grpo-s{seed}", 1, [grpo_top] * 4)
        ar_top = grpo_top + 0.10 + 0.01 * seed  # AR − GRPO: 0.10, 0.11, 0.12, each run's mean over 4 batches
        write(f"ar-s{seed}", 1, [ar_top - 0.02, ar_top + 0.02, ar_top - 0.02, ar_top + 0.02])
        runs |= {f"grpo-s{seed}": {"variant": "grpo", "seed": seed}, f"ar-s{seed}": {"variant": "ar", "seed": seed}}
    write("lopti-s0", 2, [0.3, 0.5])
    runs["lopti-s0"] = {"variant": "lopti", "seed": 0}
    results = {"runs": runs, "summary": {"grpo": {}, "ar": {}, "lopti": {}}}
    rows = quality_paired_table(tmp_path, results, "grpo").splitlines()
    assert rows[0] == f"| variant | correct ratio Â>0, π_old in {top_label} − GRPO | correct ratio Â>0, all − GRPO |"
    # differences 0.10, 0.11, 0.12: a bootstrap draw of three is all 0.10 (or all 0.12) 1 time in 27 (3.7%), so
    # the 2.5% and 97.5% quantiles are the ends; all on one side: p = 2 / 2³
    assert rows[2] == "| ar | +0.110 [+0.100, +0.120], p = 0.250 | +0.000 [+0.000, +0.000], p = 1.000 |"
    assert rows[3] == "| lopti | -0.100 (1 seed) | +0.000 (1 seed) |"
    assert quality_paired_table(tmp_path, {"runs": runs, "summary": {"ar": {}}}, "grpo") is None
    (tmp_path / "plain" / "runs" / "grpo-s0").mkdir(parents=True)
    (tmp_path / "plain" / "runs" / "grpo-s0" / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}))
    plain = {"runs": {"grpo-s0": {"variant": "grpo", "seed": 0}}, "summary": {"grpo": {}}}
    assert quality_paired_table(tmp_path / "plain", plain, "grpo") is None
