"""The tasks `lopti` knows, by name: K&K and math, and any a user registers.

Adding a task is a folder with its `Task` record (lopti/tasks/task.py says what each field is for) and one entry:
here for the shipped ones; `register_task(task)` in your own code before `lopti.cli.main` runs
(tests/tasks/test_toy_task.py adds integer addition this way and runs `lopti data`, `train` and `eval` on it); or,
for the `lopti` command itself, an installed package's entry point in the group "lopti.tasks" that names a Task.
`TaskSettings` makes the data settings of the tasks known when this module is imported (the shipped and installed
ones) the commands' flags; a task registered later runs with its own data settings at their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, make_dataclass
from importlib.metadata import entry_points
from typing import Any, get_type_hints

from lopti.errors import UserError
from lopti.tasks.kk.task import KK
from lopti.tasks.math.task import MATH
from lopti.tasks.task import DEFAULT_TASK, Task, TaskData, TaskModels, data_field

__all__ = [
    "DEFAULT_TASK", "TASKS", "PromptSettings", "Task", "TaskData", "TaskModels", "TaskSettings", "check_data_keys",
    "data_keys", "get_task", "register_installed_tasks", "register_task", "task_data_field", "task_of",
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


def merged_data(tasks: list[Task], name: str = "TaskSettings", one_split: bool = True) -> type[TaskData]:
    """Return the data settings of `tasks` as one flat dataclass: TaskData's fields, then each task's own, whose help
    names its task. It is the base of the commands' settings (`lopti train`'s, `eval`'s), so every task's data
    settings are flags; `task_data()` returns the chosen task's own dataclass. One key in two tasks is one field, its
    default the same in both. Without `one_split`, a task's settings of one split alone (its held-out sizes, its
    files: `training_only`, `evaluation_only`) are left out, for commands that draw prompts of their own."""
    own: dict[str, tuple[str, Any, Any]] = {}
    for task in tasks:
        hints = get_type_hints(task.data)
        for item in fields(task.data):
            if item.name in TaskData.__dataclass_fields__ or not item.init:
                continue
            if not one_split and item.name in (*task.data.training_only, *task.data.evaluation_only):
                continue
            if item.name in own and own[item.name][2].default != item.default:
                raise ValueError(f"task {task.name}: data setting {item.name} has another default in another task")
            spoken = {"help": f"{task.name}: {item.metadata.get('help', '')}"}
            own.setdefault(item.name, (item.name, hints[item.name], data_field(task.data, item.name, metadata=spoken)))

    def task_data(self: TaskData) -> TaskData:
        """Return the chosen task's own data settings (its `Task.data`) with these values."""
        return get_task(self.task).own_data(vars(self))

    doc = "The known tasks' data settings as flags: TaskData's, then each task's own (`task_data()`: the task's)."
    namespace = {"task_data": task_data, "__module__": __name__, "__doc__": doc}
    return make_dataclass(name, list(own.values()), bases=(TaskData,), namespace=namespace)


def data_keys() -> set[str]:
    """Return every data setting of the known tasks: TaskData's and each task's own."""
    return {item.name for task in TASKS.values() for item in fields(task.data) if item.init}


def check_data_keys(task: Task, sources: Mapping[str, str]) -> None:
    """Refuse, in one line naming its source, a given setting (key -> file or "command line") that is another task's
    data setting and not `task`'s: it would change nothing (a K&K size on a math run)."""
    own = [item.name for item in fields(task.data) if item.name not in ("task", "template")]
    others = data_keys() - {"task", "template", *own}
    for key in sources:
        if key in others:
            own.sort(key=lambda name: name in TaskData.__dataclass_fields__)  # the task's own settings first
            raise UserError(
                f"{sources[key]}: {key} is a data setting the {task.name} task does not read; its own are "
                f"{', '.join(own)}"
            )


def task_data_field(name: str, **changes: Any):
    """Return a dataclass field like the known tasks' data setting `name` (its default and help) unless `changes`
    say otherwise: for settings that take some of the task data keys, without a second copy of their defaults."""
    source = next(task.data for task in TASKS.values() if name in task.data.__dataclass_fields__)
    return data_field(source, name, **changes)


def register_installed_tasks() -> None:
    """Register the Task that each installed package's "lopti.tasks" entry point names."""
    for entry in entry_points(group="lopti.tasks"):
        register_task(entry.load())


for shipped in (KK, MATH):
    register_task(shipped)
register_installed_tasks()
TaskSettings = merged_data(list(TASKS.values()))
PromptSettings = merged_data(list(TASKS.values()), "PromptSettings", one_split=False)
