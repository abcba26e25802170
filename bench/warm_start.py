"""Build the shipped warm start of an embedded warm-started model (`tiny`, `tiny-varied`): tiny-base, then the
two SFT stages of lopti/tasks/kk/warmstart.py with the model's `WarmStartConfig`, written to
lopti/models/shipped/<model>/.

`lopti train` loads that folder instead of training the warm start on first use, so a first run spends its
few minutes on RL. This script is how the folder was made; rerun it after changing the warm start, the
tokenizer or the model's shape. It records the settings, the wall time and the machine in warm_start.json
beside the weights. Runs differ in the last bits between CPUs (bf16 kernels, thread counts).

Run (`tiny`: 1,534 s on 2 cores of an AMD EPYC with AVX-512 BF16):
  OMP_NUM_THREADS=2 python bench/warm_start.py
  OMP_NUM_THREADS=2 python bench/warm_start.py --model tiny-varied
  OMP_NUM_THREADS=2 python bench/warm_start.py --out /tmp/candidate   # build elsewhere, leave the shipped one
  OMP_NUM_THREADS=2 python bench/warm_start.py --stage-one results/stage-one   # keep stage 1; a rerun trains stage 2
Only a stage 1 made with the same `WarmStartConfig` stage-1 settings may be reused (the script does not check).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from lopti.models.embedded import SHIPPED, WARM_STARTED, warm_start_config, write_manifest
from lopti.tasks.kk.warmstart import cpu_has_bf16, warm_start


def machine() -> str:
    """Return the CPU model and core count in words."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if "model name" in line), platform.processor())
    return f"{name}, {torch.get_num_threads()} torch threads, bf16 instructions: {cpu_has_bf16()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=WARM_STARTED, default="tiny", help="the warm-started model to build")
    parser.add_argument("--out", type=Path, help="where to write the model folder (default: its shipped folder)")
    parser.add_argument(
        "--stage-one", type=Path, help="keep the model after stage 1 here; if it is there already, train stage 2 only"
    )
    args = parser.parse_args()
    config = warm_start_config(args.model)
    out = args.out or SHIPPED / args.model
    reused = args.stage_one is not None and (args.stage_one / "config.json").is_file()
    started = time.time()
    with tempfile.TemporaryDirectory() as work:
        base, built = Path(work) / "tiny-base", Path(work) / "tiny"
        base.mkdir()
        WARM_STARTED[args.model].build_base(base)
        warm_start(base, built, config, args.stage_one)
        shutil.rmtree(built / "sft-work", ignore_errors=True)
        (built / "training_args.bin").unlink(missing_ok=True)  # the Trainer's pickled settings: not needed to load
        record = {
            "warm_start": asdict(config),
            "seconds": round(time.time() - started),
            "stage_one_reused": reused,  # then "seconds" is stage 2's alone
            "machine": machine(),
            "torch": torch.__version__,
            "command": f"python bench/warm_start.py --model {args.model}",
        }
        (built / "warm_start.json").write_text(json.dumps(record, indent=1) + "\n")
        write_manifest(built)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(built, out)
    print(f"wrote {out} in {record['seconds']} s on {record['machine']}")


if __name__ == "__main__":
    main()
