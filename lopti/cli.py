"""The `lopti` command: `lopti train`, `lopti eval`, `lopti compare`, `lopti analyze`, `lopti data kk|math`."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from lopti.errors import TrainingStopped, check_output_folder, disk_full_message

RECIPES = Path(__file__).parent / "configs"
DEFAULT_RECIPES = {"kk": RECIPES / "kk-tiny-cpu.yaml", "math": RECIPES / "math-smollm2-cpu.yaml"}


def _data_kk(args: argparse.Namespace) -> None:
    from lopti.tasks.kk.data import write_kk

    check_output_folder(args.out, "--out")
    written = write_kk(
        args.out,
        people=args.people,
        train=args.train,
        test=args.test,
        seed=args.seed,
        template=args.template,
        depth=args.depth,
        width=args.width,
    )
    for path in written.values():
        print(f"wrote {path}")


def _data_math(args: argparse.Namespace) -> None:
    from lopti.tasks.math.data import write_math

    check_output_folder(args.out, "--out")
    written = write_math(
        args.out, levels=args.levels, train=args.train, test=args.test, seed=args.seed, template=args.template
    )
    for path in written.values():
        print(f"wrote {path}")


def _train(args: argparse.Namespace) -> None:
    from lopti.commands.resume import resumed_settings
    from lopti.commands.settings import parse_overrides, resolve, split
    from lopti.commands.train_run import train

    overrides = parse_overrides(args.overrides)
    task = str(overrides.get("task", "kk"))
    if not args.config and task not in DEFAULT_RECIPES:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(DEFAULT_RECIPES)}")
    config = Path(args.config) if args.config else DEFAULT_RECIPES[task]
    if args.resume:  # the run's own config.yaml, never the default recipe; train refuses changed settings
        settings = resumed_settings(args.config, {**overrides, "resume": True})
    else:
        settings = resolve(config, overrides, defaults={})
    settings.setdefault("output_dir", str(Path("runs") / f"{config.stem}-{time.strftime('%Y%m%d-%H%M%S')}"))
    args.folder = settings["output_dir"]
    run, trainer_kwargs = split(settings)
    run_dir = train(run, trainer_kwargs, settings)
    print(f"run folder: {run_dir}")


EVAL_FROM_RUN = {  # `lopti eval --config`: RunConfig key -> EvalConfig field
    "task": "task",
    "people": "people",
    "eval_people": "people",
    "levels": "levels",
    "template": "template",
    "fixed_names": "fixed_names",
    "data_seed": "data_seed",
    "eval_puzzles": "n",
    "eval_file": "eval_file",
    "eval_max_new_tokens": "max_new_tokens",
}


def _eval(args: argparse.Namespace) -> None:
    from lopti.commands.eval_run import EvalConfig, eval_markdown, run_eval
    from lopti.commands.settings import check_values, load_yaml

    settings: dict = {}
    if args.config:
        recipe = load_yaml(args.config)
        for key, field in EVAL_FROM_RUN.items():
            if recipe.get(key) is not None:
                settings[field] = recipe[key]
        settings = check_values(settings, EvalConfig, args.config)
    flags = {k: v for k, v in vars(args).items() if k in EvalConfig.__dataclass_fields__ and v is not None}
    config = EvalConfig(**{**settings, **flags})
    out = args.out or str(
        Path("evals") / f"{Path(config.model).name}-{config.task}-{config.samples}x-T{config.temperature:g}"
    )
    args.folder = out
    result = run_eval(config, out)
    print(eval_markdown(result, config))
    print(f"results folder: {out}")


def _analyze(args: argparse.Namespace) -> None:
    import dataclasses
    import difflib

    from lopti.commands.settings import check_values, load_yaml, parse_overrides
    from lopti.diagnostics.analyze import AnalyzeConfig, analyze, summary_markdown

    known = {f.name for f in dataclasses.fields(AnalyzeConfig)}
    settings = {}
    if args.config:
        recipe = load_yaml(args.config)
        settings = {
            key: recipe[key]
            for key in ("model", "task", "people", "levels", "template", "fixed_names", "data_seed")
            if key in recipe
        }
    overrides = parse_overrides(args.overrides)
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            raise ValueError(
                f"unknown analyze setting {key!r}" + (f" (did you mean {', '.join(close)}?)" if close else "")
            )
    settings.update(overrides)
    if isinstance(settings.get("edges"), str):
        settings["edges"] = tuple(float(e) for e in settings["edges"].split(","))
    if isinstance(settings.get("methods"), str):
        settings["methods"] = tuple(m.strip() for m in settings["methods"].split(","))
    config = AnalyzeConfig(**{**settings, **check_values(settings, AnalyzeConfig, "analyze settings")})
    out = args.folder = str(
        check_output_folder(args.out or Path("analysis") / f"{Path(config.model).name}-{config.task}", "--out")
    )
    result = analyze(config, out)
    print(summary_markdown(result))
    print(f"analysis folder: {out}")


def _compare(args: argparse.Namespace) -> None:
    import json
    import shlex

    from lopti.commands.compare import collect, run_all
    from lopti.commands.compare_report import results_table, write_compare_report
    from lopti.commands.settings import parse_overrides

    config = Path(args.config) if args.config else DEFAULT_RECIPES["kk"]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise ValueError(f"--seeds must be integers like 0,1,2, got {args.seeds!r}") from None
    out = args.folder = check_output_folder(args.out or Path("results") / config.stem, "--out")
    run_all(config, parse_overrides(args.overrides), variants, seeds, out)
    results = collect(out)
    command = "lopti compare " + " ".join(shlex.quote(a) for a in args.argv)
    write_compare_report(out, results, command, json.loads((out / "compare.json").read_text())["base"])
    print(results_table(results))
    print(f"results folder: {out}")


def _boolean(text: str) -> bool:
    """Return the truth value of a flag: true/false, yes/no or 1/0; anything else is an error."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one red line (argparse prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(self.prog)}: {escape(message)} (see {escape(self.prog)} --help)"
        )
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `lopti` command."""
    parser = Parser(prog="lopti", description="RL for LLMs with Advantage Reweighting and Lopti.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train",
        help="train with GRPO + AR + Lopti (default: tiny model on K&K, CPU)",
        description="Keys come from the YAML recipe, then from --key value pairs (any RunConfig or "
        "LoptiGRPOConfig field). Without --config the task's embedded recipe is used: kk-tiny-cpu.yaml, "
        "or math-smollm2-cpu.yaml with --task math.",
    )
    train.add_argument("--config", help="YAML recipe (default: the task's embedded CPU recipe)")
    train.add_argument("--resume", action="store_true", help="continue output_dir from its last complete checkpoint")
    train.set_defaults(run=_train)

    evaluate = commands.add_parser(
        "eval",
        help="held-out accuracy per K&K size or math level: greedy or sampled, pass@k, format errors",
        description="Settings come from --config (a recipe or a run folder's config.yaml: task, people, "
        "template, ...), then from the flags. Resumable: rerun the same command to finish an interrupted run.",
    )
    evaluate.add_argument("--model", required=True, help="embedded name, 🤗 folder (e.g. runs/X/final) or hub id")
    evaluate.add_argument("--config", help="take task settings from this recipe or run config.yaml")
    evaluate.add_argument("--task", help="kk or math (default kk)")
    evaluate.add_argument("--people", help="K&K sizes: 5, 2-8 or 2,4,6 (default 3-7)")
    evaluate.add_argument("--levels", help="math levels 1-5 (default 1-3)")
    evaluate.add_argument("--eval_file", help="math: evaluate on this file instead of generated problems")
    evaluate.add_argument("--n", type=int, help="held-out prompts per size or level (default 100)")
    evaluate.add_argument("--samples", type=int, help="samples per prompt (default 1)")
    evaluate.add_argument("--temperature", type=float, help="0 = greedy (default 0)")
    evaluate.add_argument("--max_new_tokens", type=int, help="answer budget in tokens (default 512)")
    evaluate.add_argument("--template", help="prompt template (default: kk chatml-think, math chat)")
    evaluate.add_argument("--fixed_names", type=_boolean, help="K&K: true/false")
    evaluate.add_argument("--data_seed", type=int, help="seed of the generated held-out set (default 0)")
    evaluate.add_argument("--batch_size", type=int, help="prompts per generate call (default 64)")
    evaluate.add_argument("--seed", type=int, help="sampling seed (default 0)")
    evaluate.add_argument("--backend", help="auto (vLLM when installed and a GPU is present) or hf (default auto)")
    evaluate.add_argument("--out", help="results folder (default evals/MODEL-TASK-Kx-TT)")
    evaluate.set_defaults(run=_eval)

    probe = commands.add_parser(
        "analyze",
        help="one-update probe of token probabilities (PAPER.md §9): gradient share, Δπ, correct ratio, bounds",
        description="Settings: --config (a recipe: model, task, people, template ...), then --key value pairs "
        "for any AnalyzeConfig field: model, task, people, levels, template, fixed_names, reward, prompts, "
        "group_size, temperature, max_new_tokens, rollouts, edges (0,0.25,0.5,0.75,1), optimizer (sgd, adamw), "
        "lr, alpha, eta, methods (grpo,ar,lopti,ar+lopti), micro_batch, seed.",
    )
    probe.add_argument("--config", help="take model and task settings from this recipe or run config.yaml")
    probe.add_argument("--out", help="output folder (default analysis/MODEL-TASK)")
    probe.set_defaults(run=_analyze)

    compare = commands.add_parser(
        "compare",
        help="the ablation study: variants x seeds on one held-out set, table with mean ± std and curves",
        description="Runs every variant x seed sequentially (finished runs are skipped, interrupted ones resumed), "
        "evaluates each on the recipe's held-out set, and writes results.md, results.json and curves.png. "
        "Extra --key value pairs override the recipe for every run.",
    )
    compare.add_argument("--config", help="base recipe (default: the embedded kk-tiny-cpu.yaml)")
    compare.add_argument("--variants", default="grpo,ar,lopti,ar+lopti", help="any of grpo, ar, lopti, ar+lopti")
    compare.add_argument("--seeds", default="0,1,2", help="trainer seeds (default 0,1,2)")
    compare.add_argument("--out", help="results folder (default results/RECIPE)")
    compare.set_defaults(run=_compare)

    data = commands.add_parser("data", help="generate task data")
    tasks = data.add_subparsers(dest="task", required=True)
    kk = tasks.add_parser("kk", help="Knights-and-Knaves puzzles as JSONL and Parquet")
    kk.add_argument("--people", default="3-7", help="sizes: 5, 3-7 or 2,4,6 (default 3-7)")
    kk.add_argument("--train", type=int, default=900, help="train puzzles per size (default 900)")
    kk.add_argument("--test", type=int, default=100, help="test puzzles per size (default 100)")
    kk.add_argument("--seed", default="0", help="seed; same seed and arguments give identical files")
    kk.add_argument("--template", default="chatml-think", help="chatml-think, plain-think, compact or chat")
    kk.add_argument("--depth", type=int, default=2, help="maximum statement depth (default 2)")
    kk.add_argument("--width", type=int, default=2, help="maximum operands of and/or (default 2)")
    kk.add_argument("--out", required=True, help="output folder")
    kk.set_defaults(run=_data_kk)
    math = tasks.add_parser("math", help="generated math word problems as JSONL and Parquet (verl schema)")
    math.add_argument("--levels", default="1-3", help="levels 1-5: 2, 1-3 or 1,3,5 (default 1-3)")
    math.add_argument("--train", type=int, default=1000, help="train problems per level (default 1000)")
    math.add_argument("--test", type=int, default=100, help="test problems per level (default 100)")
    math.add_argument("--seed", default="0", help="seed; same seed and arguments give identical files")
    math.add_argument("--template", default="chat", help="raw or chat (default chat)")
    math.add_argument("--out", required=True, help="output folder")
    math.set_defaults(run=_data_math)
    return parser


def _interrupted(args: argparse.Namespace) -> str:
    """Return what to say after Ctrl-C: how to continue, when the command can."""
    if args.command == "train" and args.folder:
        if not any(Path(args.folder).glob("checkpoint-*/trainer_state.json")):
            return "interrupted before the first checkpoint was saved; run the same command again to start over"
        return f"interrupted; continue with: lopti train --resume --output_dir {shlex.quote(str(args.folder))}"
    if args.command in ("eval", "compare"):  # both pick up where they stopped
        return f"interrupted; continue with: lopti {args.command} {shlex.join(args.argv)}"
    return "interrupted"


def main(argv: list[str] | None = None) -> int:
    """Run the command. Every failure a user can act on ends in one red line on stderr: bad input with exit
    status 2, a stopped run or a full disk with 1, Ctrl-C with 130 (and the command that continues)."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command not in ("train", "analyze", "compare"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exit:  # --help, or a flag argparse rejected (already printed)
        return exit.code if isinstance(exit.code, int) else 2
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    args.folder = getattr(args, "out", None)  # where the command writes; `lopti train` sets its output_dir
    args.overrides = extra  # train, analyze, compare: --key value pairs for any config field
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    started = time.time()
    try:
        if args.command in ("train", "eval", "analyze", "compare"):
            from lopti.console import hide_third_party_noise

            hide_third_party_noise()
        args.run(args)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}")
        return 2
    except TrainingStopped as error:
        console.print(f"[bold red]stopped:[/] {escape(str(error))}")
        return 1
    except KeyboardInterrupt:
        console.print(f"[bold red]{escape(_interrupted(args))}[/]")
        return 130
    except (OSError, RuntimeError) as error:
        message = disk_full_message(error, args.folder, started)
        if message is None:
            raise
        console.print(f"[bold red]error:[/] {escape(message)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
