"""The `lopti` command: `lopti train`, `lopti data kk`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

DEFAULT_RECIPE = Path(__file__).parent / "configs" / "kk-tiny-cpu.yaml"


def _data_kk(args: argparse.Namespace) -> None:
    from lopti.tasks.kk.data import write_kk

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


def _train(args: argparse.Namespace) -> None:
    import time

    from lopti.train.run import train
    from lopti.train.settings import parse_overrides, resolve, split

    config = Path(args.config) if args.config else DEFAULT_RECIPE
    overrides = parse_overrides(args.overrides)
    if args.resume:
        overrides["resume"] = True
    settings = resolve(config, overrides, defaults={})
    settings.setdefault("output_dir", str(Path("runs") / f"{config.stem}-{time.strftime('%Y%m%d-%H%M%S')}"))
    run, trainer_kwargs = split(settings)
    run_dir = train(run, trainer_kwargs, settings)
    print(f"run folder: {run_dir}")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `lopti` command."""
    parser = argparse.ArgumentParser(prog="lopti", description="RL for LLMs with Advantage Reweighting and Lopti.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train",
        help="train with GRPO + AR + Lopti (default: tiny model on K&K, CPU)",
        description="Keys come from the YAML recipe, then from --key value pairs (any RunConfig or "
        "LoptiGRPOConfig field). Without --config the embedded default recipe kk-tiny-cpu.yaml is used.",
    )
    train.add_argument("--config", help="YAML recipe (default: the embedded kk-tiny-cpu.yaml)")
    train.add_argument("--resume", action="store_true", help="continue output_dir from its last complete checkpoint")
    train.set_defaults(run=_train)

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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; bad input ends in one red line on stderr and exit status 2."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "train":
        args.overrides = extra  # --key value pairs for any config field
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        args.run(args)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {error}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
