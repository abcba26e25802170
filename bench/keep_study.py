"""Copy a `lopti compare` folder's records without its weights, so a study run over several sittings on fresh
machines keeps its finished runs.

Kept: the study's files (compare.json, threads.json, results.*, curves.png) and each run's settings, metrics,
evaluations, report and run.json; left out: checkpoints, final/ weights, TensorBoard logs, locks and each run's
plots (the study's curves.png draws every run). A run whose
run.json and evaluations are there counts as finished for `lopti compare`, so copying the records back into a
results folder (`cp -r KEPT/. RESULTS/`) and running the same `lopti compare` trains only the runs left.

    python bench/keep_study.py /scratch/smollm2-math results/smollm2-math
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

STUDY_FILES = ("compare.json", "threads.json", "results.json", "results.md", "curves.png", "command.txt")
RUN_FILES = ("config.yaml", "metrics.jsonl", "run.json", "report.md")  # a run's plots: the study's curves.png
RUN_PATTERNS = ("eval_*.json",)


def keep(study: Path, kept: Path) -> list[Path]:
    """Copy `study`'s records into `kept`; return the files copied."""
    if not (study / "compare.json").is_file():
        raise SystemExit(f"{study}: no compare.json, not a lopti compare folder")
    copied = []
    sources = [study / name for name in STUDY_FILES]
    for run_dir in sorted(path for path in (study / "runs").glob("*") if path.is_dir()):  # none before a run starts
        sources += [run_dir / name for name in RUN_FILES]
        sources += [path for pattern in RUN_PATTERNS for path in sorted(run_dir.glob(pattern))]
    for source in sources:
        if source.is_file():
            target = kept / source.relative_to(study)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            copied.append(target)
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the lopti compare folder")
    parser.add_argument("kept", type=Path, help="where its records go")
    args = parser.parse_args()
    copied = keep(args.study, args.kept)
    print(f"{len(copied)} files, {sum(p.stat().st_size for p in copied) / 1e6:.1f} MB in {args.kept}")


if __name__ == "__main__":
    main()
