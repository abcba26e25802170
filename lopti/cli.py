"""The `lopti` command: `lopti train`, `lopti eval`, `lopti compare`, `lopti analyze`, `lopti data TASK`.

Each command's settings are dataclasses; TRL's TrlParser makes their fields its --flags, with their help and defaults
(`lopti.commands.arguments`), so this file holds only what each command does with them and how errors are printed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import signal
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

from lopti.errors import (
    NumericalFailure,
    SettingError,
    Terminated,
    TrainingStopped,
    check_output_folder,
    disk_full_message,
    peer_failure,
)
from lopti.extras import require


def _train(args: argparse.Namespace) -> None:
    from lopti.commands.settings import train_settings
    from lopti.commands.train_run import train
    from lopti.cpu import with_cpu_precision

    settings, args.config = train_settings(args.config, args.settings)  # the recipe: a refused value's source
    args.folder = settings["output_dir"]
    run_dir = train(with_cpu_precision(settings))
    if os.environ.get("RANK", "0") == "0":
        print(f"run folder: {run_dir}")


def _from_config(args: argparse.Namespace, schema: type) -> Any:
    """Return the settings of `schema` from its defaults, then --config (a recipe or run config.yaml), then flags."""
    from lopti.commands.settings import from_run_config
    from lopti.tasks.registry import check_data_keys, get_task

    from_file = from_run_config(args.config, schema) if args.config else {}
    (config,) = args.parser.build(from_file | args.settings)
    check_data_keys(get_task(config.task), dict.fromkeys(args.settings, "command line"))
    return config


def _eval(args: argparse.Namespace) -> None:
    from lopti.commands.eval_run import EvalConfig, default_folder, eval_markdown, run_eval

    config = _from_config(args, EvalConfig)
    out = args.folder = args.out or str(default_folder(config))
    result = run_eval(config, out)
    print(eval_markdown(result, config))
    print(f"results folder: {out}")


def _analyze(args: argparse.Namespace) -> None:
    from lopti.diagnostics.analyze import AnalyzeConfig, analyze, summary_markdown

    config = _from_config(args, AnalyzeConfig)
    out = args.folder = args.out or str(Path("analysis") / f"{Path(config.model).name}-{config.task}")
    result = analyze(config, check_output_folder(out, "--out"))
    print(summary_markdown(result))
    print(f"analysis folder: {out}")


def _compare(args: argparse.Namespace) -> None:
    from lopti.commands.settings import default_recipe
    from lopti.experiments.compare import CompareConfig, run_study

    study = CompareConfig(**{k: v for k, v in args.settings.items() if k in CompareConfig.__dataclass_fields__})
    overrides = {k: v for k, v in args.settings.items() if k not in CompareConfig.__dataclass_fields__}
    config = args.config = Path(args.config) if args.config else default_recipe()
    out = args.folder = check_output_folder(study.out or Path("results") / config.stem, "--out")
    print(run_study(config, overrides, study, out, args.argv))
    print(f"results folder: {out}")


def _data(args: argparse.Namespace) -> None:
    (data,) = args.parser.build(args.settings)
    args.folder = data.out
    for path in data.write().values():
        print(f"wrote {path}")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one red line (argparse prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(self.prog)}: {escape(message)} (see {escape(self.prog)} --help)"
        )
        raise SystemExit(2)


RUN, TRAINER = "lopti.commands.settings:RunConfig", "lopti.train.config:LoptiGRPOConfig"
SETTINGS = {  # each command's settings dataclasses, imported only for that command (TRL takes seconds)
    "train": (RUN, TRAINER),
    "eval": ("lopti.commands.eval_run:EvalConfig",),
    "analyze": ("lopti.diagnostics.analyze:AnalyzeConfig",),
    "compare": ("lopti.experiments.compare:CompareConfig", RUN, TRAINER),
}  # and "data TASK": the task's own `data_settings`
COMMANDS = {  # name: (one-line help, --help description)
    "train": (
        "train with GRPO + AR + Lopti (default: the default task's embedded CPU recipe)",
        "Settings: the field defaults, then the YAML recipe, then --key value. Without --config the task's embedded "
        "recipe (lopti/configs) is used.",
    ),
    "eval": (
        "held-out accuracy per group of the task's prompts: greedy or sampled, pass@k, format errors",
        "Settings: the field defaults, then --config (a recipe or a run's config.yaml gives the held-out set and "
        "the answer budget), then --key value. Resumable: run the same command again to finish an interrupted run.",
    ),
    "analyze": (
        "one-update probe of token probabilities (docs/analysis.md): gradient share, Δπ, correct ratio, bounds",
        "Settings: the field defaults, then --config (a recipe or a run's config.yaml gives the model, the task "
        "data and the method and AdamW settings), then --key value.",
    ),
    "compare": (
        "the ablation study: variants x seeds on one held-out set, table with mean ± std and curves",
        "Runs every variant x seed (--jobs at a time; finished runs are skipped, interrupted ones resumed), "
        "evaluates each on the recipe's held-out set, and writes results.md, results.json and curves.png; with "
        "--grid, one such folder per value and grid.md, grid.json, grid.png. Any lopti train setting given here "
        "overrides the base recipe for every run.",
    ),
}  # and "data TASK": the task's `summary`
CONFIG, OUT = "--config FILE", "--out FOLDER"
OPTIONS = {  # what a command reads or writes besides its settings: "--flag METAVAR": help
    "train": {CONFIG: "YAML recipe (default: the task's embedded CPU recipe)"},
    "eval": {
        CONFIG: "take the held-out set and answer budget from this recipe or run config.yaml",
        OUT: "results folder (default evals/MODEL-TASK-Kx-TT)",
    },
    "compare": {CONFIG: "base recipe of every run (default: the embedded recipe lopti train uses)"},
    "analyze": {
        CONFIG: "take the model, task data, method (ar_alpha, lopti_eta, clip) and AdamW settings from this recipe or "
        "run config.yaml",
        OUT: "output folder (default analysis/MODEL-TASK)",
    },
}


def _imported(path: str) -> type:
    """Return the object that "module:name" names."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _settings_classes(name: str) -> tuple[type, ...]:
    """Return the settings dataclasses of command `name` ("train", "data NAME", ...)."""
    if name.startswith("data "):
        from lopti.tasks.registry import get_task

        return (get_task(name[5:]).data_settings,)
    return tuple(map(_imported, SETTINGS[name]))


def _commands() -> dict[str, tuple[str, str]]:
    """Return every command's (one-line help, --help description): COMMANDS and one `data TASK` per task that
    generates data."""
    from lopti.tasks.registry import TASKS

    data = {f"data {task.name}": (task.summary, "") for task in TASKS.values() if task.data_settings is not None}
    return COMMANDS | data


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the `lopti` command itself: its commands, --help and --version (each command's settings
    are `command_parser`'s, made only for the command run: `lopti train`'s import TRL, which `lopti data` has no
    need of)."""
    parser = Parser(prog="lopti", description="RL for LLMs with Advantage Reweighting and Lopti.")
    # the installed distribution's version, so a wheel and an editable install each report what pip installed
    parser.add_argument("--version", action="version", version=f"lopti {metadata.version('lopti')}")
    commands = parser.add_subparsers(dest="command", required=True)
    data = None
    for name, (summary, _) in _commands().items():
        if name.startswith("data "):
            data = data or commands.add_parser("data", help="generate task data").add_subparsers(
                dest="task", required=True
            )
            data.add_parser(name[5:], help=summary, add_help=False)
        else:  # its flags, --help included, are `command_parser`'s
            commands.add_parser(name, help=summary, add_help=False)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """Return the parser of command `name` ("train", "data NAME", ...): a flag per field of its settings dataclasses,
    and the files it reads or writes besides them (--config, --out)."""
    if name.startswith("data "):  # the base install runs it: no TRL
        from lopti.commands.arguments import DataParser as settings_parser
    else:
        from lopti.commands.settings import LoptiParser as settings_parser
    parser = settings_parser(_settings_classes(name), prog=f"lopti {name}", description=_commands()[name][1])
    for option, text in OPTIONS.get(name, {}).items():
        flag, metavar = option.split()
        parser.add_argument(flag, metavar=metavar, help=text, default=argparse.SUPPRESS)  # absent: None (`main`)
    return parser


def _stopped(args: argparse.Namespace, what: str) -> str:
    """Return `what` happened ("interrupted", ...) and how to continue, when the command can."""
    if args.command == "train" and args.folder:
        if not any(Path(args.folder).glob("checkpoint-*/trainer_state.json")):
            return f"{what} before the first checkpoint was saved; run the same command again to start over"
        return f"{what}; continue with: lopti train --resume --output_dir {shlex.quote(str(args.folder))}"
    if args.command in ("eval", "compare"):  # both pick up where they stopped
        return f"{what}; continue with: lopti {args.command} {shlex.join(args.argv)}"
    return what


def _terminated(signum: int, frame: object) -> NoReturn:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run the command. Every failure a user can act on ends in one red line on stderr: bad input (`UserError` and
    the other ValueErrors, FileNotFoundError, PermissionError) with exit status 2; a stopped run, a numerical failure
    in training (`NumericalFailure`), a full disk or the death of another process of a distributed launch with 1;
    Ctrl-C with 130 and SIGTERM with 143 (and the command that continues)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the command's name; `lopti`, --help, --version and an unknown command end here
        args, words = build_parser().parse_known_args(argv)
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else 2
    args.name = f"data {args.task}" if args.command == "data" else args.command
    args.argv, args.folder = argv[1:], None
    # args.folder: where the command writes, once it knows; named after a full disk
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    started = time.time()
    terminable = args.command == "train" and threading.current_thread() is threading.main_thread()
    if terminable:  # a launcher ends the other processes with SIGTERM when one dies: say so, as for Ctrl-C
        signal.signal(signal.SIGTERM, _terminated)
    try:
        if args.command != "data":  # `lopti data` needs only lopti's base install
            require("cli", f"lopti {args.command}")
        args.parser = command_parser(args.name)
        args.settings, options = args.parser.given(words)
        args.config = args.out = None
        vars(args).update(vars(options))
        if args.command in ("train", "eval", "analyze", "compare"):
            from lopti.console import hide_third_party_noise

            hide_third_party_noise()
        run = {"train": _train, "eval": _eval, "analyze": _analyze, "compare": _compare}.get(args.name, _data)
        run(args)
    except SystemExit as exit:  # --help
        return exit.code if isinstance(exit.code, int) else 2
    except BaseException as error:
        if terminable:  # the line below is printed whole even when the launcher's SIGTERM follows the error
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        status, line = _failure(error, args, started)
        if line:
            console.print(line)
        if status is None:
            raise
        return status
    return 0


def _failure(error: BaseException, args: argparse.Namespace, started: float) -> tuple[int | None, str]:
    """Return the exit status and the red line for `error` (status None: not one a user can act on, re-raised)."""
    if isinstance(error, SettingError):  # a dataclass refused a value: from a flag, else from the --config file
        given = getattr(args, "settings", None) or {}
        source = "command line" if error.key in given else getattr(args, "config", None) or "settings"
        return 2, f"[bold red]error:[/] {escape(f'{source}: {error}')}"
    if isinstance(error, (ValueError, FileNotFoundError, PermissionError)):
        return 2, f"[bold red]error:[/] {escape(str(error))}"
    if isinstance(error, TrainingStopped):
        return 1, f"[bold red]stopped:[/] {escape(str(error))}"
    if isinstance(error, NumericalFailure):  # the run's numbers, not a setting (the user's mistakes are ValueErrors)
        return 1, f"[bold red]numerical failure:[/] {escape(str(error))}"
    if isinstance(error, Terminated):  # each process that gets it says so: SIGTERM need not reach rank 0
        return 143, f"[bold red]{escape(_stopped(args, 'ended by SIGTERM'))}[/]"
    if isinstance(error, KeyboardInterrupt):  # Ctrl-C reaches every process of a distributed launch: rank 0 says so
        rank_0 = os.environ.get("RANK", "0") == "0"
        return 130, f"[bold red]{escape(_stopped(args, 'interrupted'))}[/]" if rank_0 else ""
    if isinstance(error, (OSError, RuntimeError)):
        message = disk_full_message(error, args.folder, started)
        if message is not None:
            return 1, f"[bold red]error:[/] {escape(message)}"
        said = peer_failure(error)
        if said is not None:
            line = _stopped(args, f"another process of this distributed launch ended ({said})")
            return 1, f"[bold red]stopped:[/] {escape(line)}"
    return None, ""


if __name__ == "__main__":
    sys.exit(main())
