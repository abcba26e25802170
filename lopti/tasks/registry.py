"""The tasks `lopti` knows, by name: K&K and math, and any a user registers.

Adding a task is a folder with its `Task` record (lopti/tasks/task.py says what each field is for) and one entry:
here for the shipped ones; `register_task(task)` in your own code before `lopti.cli.main` runs
(tests/tasks/test_toy_task.py adds integer addition this way and runs `lopti data`, `train` and `eval` on it); or,
for the `lopti` command itself, an installed package's entry point in the group "lopti.tasks" that names a Task.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from lopti.tasks.kk.task import KK
from lopti.tasks.math.task import MATH
from lopti.tasks.task import DEFAULT_TASK, Task, TaskData, TaskModels, task_data_field

__all__ = [
    "DEFAULT_TASK", "TASKS", "Task", "TaskData", "TaskModels", "get_task", "register_installed_tasks",
    "register_task", "task_data_field", "task_of",
]  # fmt: skip

TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Make `task` known to every command under its name; return it. A name already taken is refused."""
    if task.name in TASKS and TASKS[task.name] is not task:
        raise ValueError(f"a task named {task.name!r} is already registered")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """Return the task called `name`, or raise a ValueError listing the known ones."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def task_of(settings: Mapping[str, Any]) -> Task:
    """Return the task a run's settings (a recipe or config.yaml as a dict) name, `DEFAULT_TASK` where they name
    none: as `lopti train` reads them, so that what a study or report says of a recipe holds for its runs."""
    return get_task(settings.get("task") or DEFAULT_TASK)


def register_installed_tasks() -> None:
    """Register the Task that each installed package's "lopti.tasks" entry point names."""
    for entry in entry_points(group="lopti.tasks"):
        register_task(entry.load())


for shipped in (KK, MATH):
    register_task(shipped)
register_installed_tasks()
