"""The `lopti` command: `lopti train`, `lopti data kk`."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

TRAIN_PLAN = """\
lopti train (embedded default) will:
  1. build the embedded `tiny` Qwen2-style model and its K&K tokenizer (cached, no download);
  2. warm-start it with a short SFT stage on generated K&K puzzles;
  3. run GRPO + Advantage Reweighting + Lopti on 2-3-person K&K puzzles on the CPU;
  4. evaluate before and after on held-out puzzles and write report.md in the run folder.
The trainer has not landed yet (see the open issues); today this command only prints the plan.
Try `lopti data kk --out data/kk` to generate the puzzles it will train on."""


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
    print(TRAIN_PLAN)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `lopti` command."""
    parser = argparse.ArgumentParser(prog="lopti", description="RL for LLMs with Advantage Reweighting and Lopti.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train with GRPO + AR + Lopti (default: tiny model on K&K, CPU)")
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
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {error}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
