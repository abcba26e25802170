"""`Task.unread_keys`: the data settings a task does not read, which the commands refuse (a K&K `people` on a
math run would change nothing); the one default task; each task's own AR α (the paper's)."""

from dataclasses import replace

from lopti.tasks.registry import DEFAULT_TASK, TaskData, get_task, task_of


def test_each_shipped_task_names_the_other_tasks_data_settings_as_unread():
    keys = ["task", "template", "people", "eval_people", "fixed_names", "levels", "train_file", "eval_file",
            "train_puzzles", "eval_puzzles", "data_seed", "learning_rate"]  # fmt: skip
    assert get_task("kk").unread_keys(keys) == ["levels", "train_file", "eval_file"]
    assert get_task("math").unread_keys(keys) == ["people", "eval_people", "fixed_names"]


def test_a_task_that_names_no_data_keys_reads_them_all():
    assert replace(get_task("kk"), data_keys=None).unread_keys(["levels", "people"]) == []


def test_settings_that_name_no_task_are_the_default_tasks_everywhere():
    assert TaskData().task == DEFAULT_TASK and task_of({}) is get_task(DEFAULT_TASK)
    assert task_of({"task": "kk"}) is get_task("kk") and task_of({"task": None}) is get_task(DEFAULT_TASK)


def test_each_shipped_task_has_the_papers_ar_alpha():
    # docs/paper.md §4, §7, §8: 0.3 on K&K with Lopti, 0.1 on math
    assert (get_task("kk").ar_alpha, get_task("math").ar_alpha) == (0.3, 0.1)
