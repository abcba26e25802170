"""`Task.unread_keys`: the data settings a task does not read, which the commands refuse (a K&K `people` on a
math run would change nothing)."""

from dataclasses import replace

from lopti.tasks.registry import get_task


def test_each_shipped_task_names_the_other_tasks_data_settings_as_unread():
    keys = ["task", "template", "people", "eval_people", "fixed_names", "levels", "train_file", "eval_file",
            "train_puzzles", "eval_puzzles", "data_seed", "learning_rate"]  # fmt: skip
    assert get_task("kk").unread_keys(keys) == ["levels", "train_file", "eval_file"]
    assert get_task("math").unread_keys(keys) == ["people", "eval_people", "fixed_names"]


def test_a_task_that_names_no_data_keys_reads_them_all():
    assert replace(get_task("kk"), data_keys=None).unread_keys(["levels", "people"]) == []
