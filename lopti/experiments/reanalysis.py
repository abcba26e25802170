"""The statistics tables of finished study folders, recomputed from their per-run records with
lopti.experiments.statistics: `python -m lopti.experiments.reanalysis FOLDER...` prints them as markdown.

A folder is what `lopti compare` leaves (or its records without weights): results.json and runs/*/ with each
run's evaluations. Nothing in it is written. Each study gets, for greedy accuracy, sampled accuracy and sampled
pass@k, one table of every variant against GRPO and one of the contrasts that say where an effect comes from
(Lopti against its controls, AR + Lopti against each of its parts); each table is one family for Holm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lopti.experiments.compare_report import sampled_evaluations
from lopti.experiments.paired_tables import collapse_table, decodings, paired_table, problem_count
from lopti.experiments.statistics import smallest_p

# variant − base: does the split add anything beyond a second pass or a random split; does each part of
# AR + Lopti add to the other
CONTRASTS = (("lopti", "grpo2"), ("lopti", "lopti_random"), ("ar+lopti", "lopti"), ("ar+lopti", "ar"))


def contrasts(variants: list[str]) -> list[tuple[str, str]]:
    """Return the CONTRASTS whose two variants the study ran."""
    return [(variant, base) for variant, base in CONTRASTS if variant in variants and base in variants]


def read_study(folder: Path) -> tuple[dict[str, Any], dict[str, dict]]:
    """Return a study folder's results.json and its runs' sampled evaluations (run name → evaluation)."""
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    return results, sampled_evaluations(folder, results)


def reanalyse(folder: Path, title: str | None = None) -> str:
    """Return the markdown of one study's recomputed tables."""
    results, sampled = read_study(folder)
    seeds = max(summary["seeds"] for summary in results["summary"].values())
    parts = [
        f"## {title or folder.name}",
        "",
        f"Records: `{folder.name}/` ({len(results['runs'])} runs, {seeds} seeds per variant; the exact sign-flip "
        f"test cannot go below p = {smallest_p(seeds):.3f} with {seeds} seeds).",
        "",
    ]
    for name, (source, metric) in decodings(sampled).items():
        size = problem_count(results, source)
        parts += [f"### {name}, {size} held-out problems", "", "Against GRPO:", ""]
        parts.append(paired_table(results, source, metric))
        pairs = contrasts(list(results["summary"]))
        if pairs:
            parts += ["Contrasts:", "", paired_table(results, source, metric, pairs)]
    parts += ["### Collapsed runs against GRPO's (Fisher's exact test)", "", collapse_table(results)]
    return "\n".join(parts)


def reanalyse_all(folders: list[Path]) -> str:
    """Return the recomputed tables of each folder, with the command that recomputes them."""
    command = "python -m lopti.experiments.reanalysis " + " ".join(str(folder) for folder in folders)
    return "\n".join([f"<!-- recomputed by: {command} -->", "", *(reanalyse(folder) for folder in folders)])


def main(folders: list[str]) -> None:
    """Print the recomputed tables of each folder."""
    print(reanalyse_all([Path(folder) for folder in folders]), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
