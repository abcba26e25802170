"""A study's runs: planned seed by seed, so that a study stopped partway holds whole seeds."""

from lopti.experiments.study import plan_runs


def test_runs_are_planned_seed_by_seed(tmp_path):
    jobs = plan_runs(tmp_path, {"max_steps": 2}, ["grpo", "lopti"], [0, 1], threads=1)
    assert [job.label for job in jobs] == ["grpo-s0", "lopti-s0", "grpo-s1", "lopti-s1"]
