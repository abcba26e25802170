"""A study's runs: planned seed by seed, so that a study stopped partway holds whole seeds."""

import pytest

from lopti.experiments.study import plan_runs


def test_runs_are_planned_seed_by_seed(tmp_path):
    jobs = plan_runs(tmp_path, {"max_steps": 2}, ["grpo", "lopti"], [0, 1], threads=1)
    assert [job.label for job in jobs] == ["grpo-s0", "lopti-s0", "grpo-s1", "lopti-s1"]


def started_run(out, name: str, bf16: bool) -> None:
    """Leave in `out` a run started with `bf16` (its config.yaml), as a stopped study leaves one."""
    run_dir = out / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"bf16: {str(bf16).lower()}\nseed: 0\n")


def test_a_new_study_takes_the_cpus_precision_for_all_its_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("lopti.cpu.precision.cpu_kind", lambda: "amx")  # native bf16
    jobs = plan_runs(tmp_path, {"max_steps": 2, "use_cpu": True}, ["grpo", "lopti"], [0], threads=1)
    assert [job.settings["bf16"] for job in jobs] == [True, True]


def test_a_study_continued_on_a_cpu_without_native_bf16_keeps_the_bf16_of_its_first_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("lopti.cpu.precision.cpu_kind", lambda: "avx2")  # no native bf16
    started_run(tmp_path, "grpo-s0", bf16=True)
    jobs = plan_runs(tmp_path, {"max_steps": 2, "use_cpu": True}, ["grpo", "lopti"], [0, 1], threads=1)
    assert {job.label: job.settings["bf16"] for job in jobs} == dict.fromkeys(
        ["grpo-s0", "lopti-s0", "grpo-s1", "lopti-s1"], True
    )


def test_a_precision_given_to_the_study_is_the_one_its_runs_take(tmp_path, monkeypatch):
    monkeypatch.setattr("lopti.cpu.precision.cpu_kind", lambda: "amx")  # native bf16
    started_run(tmp_path, "grpo-s0", bf16=True)
    jobs = plan_runs(tmp_path, {"max_steps": 2, "use_cpu": True, "bf16": False}, ["grpo"], [0], threads=1)
    assert jobs[0].settings["bf16"] is False


def test_a_study_whose_runs_trained_in_two_precisions_is_refused_naming_them(tmp_path):
    for name in ("grpo-s0", "grpo-s1", "lopti-s1"):
        started_run(tmp_path, name, bf16=True)
    started_run(tmp_path, "lopti-s0", bf16=False)
    with pytest.raises(ValueError, match=r"lopti-s0 trained in fp32, the study's other 3 runs in bf16"):
        plan_runs(tmp_path, {"max_steps": 2, "use_cpu": True}, ["grpo", "lopti"], [0, 1], threads=1)
