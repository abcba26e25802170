"""Each task owns its data settings (`Task.data`): the commands take every known task's as flags (`TaskSettings`),
refuse one the chosen task does not read (a K&K `people` on a math run would change nothing), and hand the task its
own dataclass; the one default task; each task's own AR α (the paper's)."""

from dataclasses import dataclass, field, fields

import pytest

from lopti.errors import UserError
from lopti.tasks.registry import DEFAULT_TASK, TaskData, TaskSettings, check_data_keys, get_task, merged_data, task_of


def test_each_shipped_task_refuses_the_other_tasks_data_settings_and_takes_its_own():
    common = dict.fromkeys(["task", "template", "train_puzzles", "eval_puzzles", "data_seed", "learning_rate"], "x")
    check_data_keys(get_task("kk"), common | dict.fromkeys(["people", "eval_people", "fixed_names"], "x"))
    check_data_keys(get_task("math"), common | dict.fromkeys(["levels", "train_file", "eval_file"], "x"))
    own = "people, eval_people, fixed_names, train_puzzles, eval_puzzles, data_seed"
    refused = rf"^a\.yaml: levels is a data setting the kk task does not read; its own are {own}$"
    with pytest.raises(UserError, match=refused):
        check_data_keys(get_task("kk"), {"people": "b.yaml", "levels": "a.yaml"})
    with pytest.raises(UserError, match="command line: fixed_names is a data setting the math task does not read"):
        check_data_keys(get_task("math"), {"fixed_names": "command line"})


def test_a_task_gets_its_own_data_settings_and_the_commands_every_tasks():
    math = get_task("math").own_data({"task": "kk", "levels": "2", "people": "3", "data_seed": 5})
    assert type(math) is get_task("math").data and (math.task, math.levels, math.data_seed) == ("math", "2", 5)
    assert not hasattr(math, "people")
    flags = {item.name: item for item in fields(TaskSettings)}
    for name in ("kk", "math"):
        for item in fields(get_task(name).data):
            assert item.name in flags and flags[item.name].default == item.default
    assert flags["people"].metadata["help"].startswith("kk: ") and flags["levels"].metadata["help"].startswith("math: ")
    kk = TaskSettings(task="kk", people="4", levels="2").task_data()
    assert type(kk) is get_task("kk").data and kk.people == "4" and not hasattr(kk, "levels")


def test_two_tasks_may_share_a_data_setting_only_with_one_default():
    @dataclass
    class Other(TaskData):
        people: str = field(default="2", metadata={"help": "Another task's sizes."})

    other = get_task("kk").__class__(**{**vars(get_task("kk")), "name": "other", "data": Other})
    with pytest.raises(ValueError, match="task other: data setting people has another default in another task"):
        merged_data([get_task("kk"), other])


def test_the_held_out_split_alone_and_whether_there_is_one():
    math = get_task("math").own_data({"eval_file": "test.jsonl", "eval_puzzles": 0})
    assert math.has_held_out() and math.held_out_only().train_file == "test.jsonl"
    assert math.held_out_only().train_puzzles == 0
    kk = get_task("kk").own_data({"eval_puzzles": 0})
    assert not kk.has_held_out() and get_task("kk").own_data({}).held_out_only().train_puzzles == 0


def test_settings_that_name_no_task_are_the_default_tasks_everywhere():
    assert TaskData().task == DEFAULT_TASK and task_of({}) is get_task(DEFAULT_TASK)
    assert task_of({"task": "kk"}) is get_task("kk") and task_of({"task": None}) is get_task(DEFAULT_TASK)


def test_each_shipped_task_has_the_papers_ar_alpha():
    # docs/paper.md §4, §7, §8: 0.3 on K&K with Lopti, 0.1 on math
    assert (get_task("kk").ar_alpha, get_task("math").ar_alpha) == (0.3, 0.1)
