"""`lopti compare --grid KEY=V1,V2,...`: the comparison repeated at each value of `lopti train` settings.

Each grid point is an ordinary comparison folder, OUT/KEY=VALUE/ (OUT/K1=V1,K2=V2/ for several keys), with
the value as an override; the same folder made by `lopti compare --KEY VALUE --out OUT/KEY=VALUE` is
reused as it is. OUT/grid.json holds what the grid is (a folder holding another grid is refused) and its
results; grid.md tabulates held-out accuracy and the share of collapsed runs per variant and value; grid.png
draws accuracy against the swept value. Every run of every point goes to one scheduler (`--jobs`), and the
whole grid resumes like a comparison does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
from pathlib import Path
from typing import Any

from lopti.commands.settings import resolve, train_keys, train_parser
from lopti.errors import SettingError, UserError, check_keys
from lopti.experiments.compare_report import write_compare_report
from lopti.experiments.jobs import run_jobs, threads_per_run
from lopti.experiments.plan import check_registered, study_plan
from lopti.experiments.study import (
    COLLAPSE_FORMAT_ERROR,
    GROWABLE,
    claim_study,
    collapsed,
    collect,
    mean_std,
    plan_runs,
    study_base,
    train_keeping_records,
    train_settings,
)
from lopti.files import claim_folder, folder_lock, write_atomic
from lopti.train.config import LoptiGRPOConfig

GRID_FILE = "grid.json"
# set by each variant or by compare itself, so a grid over them would run the same thing at every point
VARIANT_KEYS = frozenset(
    {"lopti", "num_iterations", "token_credit", "token_credit_kwargs", "seed", "evaluate", "output_dir", "resume"}
)


def parse_grid(text: str, overrides: dict[str, Any]) -> dict[str, list[str]]:
    """Return each swept key with its values as written, every value checked as `lopti train` checks it."""
    grid: dict[str, list[str]] = {}
    for part in text.split(";"):
        key, equals, listed = (piece.strip() for piece in part.partition("="))
        if not equals or not key:
            raise ValueError(f"--grid {part.strip()!r}: expected KEY=V1,V2,... (several keys joined with ';')")
        check_keys([key], train_keys(), "--grid")
        if key in VARIANT_KEYS:
            raise ValueError(f"--grid {key}: set by each variant or by compare; choose it with --variants or --seeds")
        if key in grid:
            raise ValueError(f"--grid {key}: listed twice")
        if key in overrides:
            raise ValueError(f"--grid {key}: also given as --{key}; give it in one place")
        texts = [value.strip() for value in listed.split(",")]
        if "" in texts:
            raise ValueError(f"--grid {key}: empty value in {listed!r}")
        unusable = [value for value in texts if "/" in value or "=" in value]
        if unusable:
            raise ValueError(f"--grid {key}: value {unusable[0]!r} cannot name a folder")
        values = [grid_value(key, value) for value in texts]
        try:
            for value in values:
                LoptiGRPOConfig.check_values({key: value})
        except SettingError as error:
            raise UserError(f"--grid {key}: {error}") from None
        repeated = [t for t, v in zip(texts, values, strict=True) if values.count(v) > 1]
        if repeated:
            raise ValueError(f"--grid {key}: {', '.join(repeated)} are the same value")
        grid[key] = texts
    return grid


def grid_value(key: str, text: str) -> Any:
    """Return a grid value as `lopti train`'s flag `--key` reads it."""
    return train_parser().typed({key: text}, f"--grid {key}")[key]


def grid_points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Return every combination of the grid's values (key → value as written), in the grid's order."""
    return [dict(zip(grid, combination, strict=True)) for combination in itertools.product(*grid.values())]


def point_label(values: dict[str, str]) -> str:
    """Return the folder name of a grid point: KEY=VALUE, joined with ',' for several keys."""
    return ",".join(f"{key}={value}" for key, value in values.items())


def point_command(argv: list[str], values: dict[str, str], folder: Path) -> str:
    """Return the plain `lopti compare` command that makes (or reuses) one grid point's folder."""
    kept, skip = [], False
    for word in argv:
        if skip or word in ("--grid", "--out"):
            skip = not skip  # the flag's value follows it
            continue
        if not word.startswith(("--grid=", "--out=")):
            kept.append(word)
    point = [word for key, value in values.items() for word in (f"--{key}", value)]
    return "lopti compare " + shlex.join([*kept, *point, "--out", str(folder)])


def run_grid(
    config: Path, overrides: dict[str, Any], grid: dict[str, list[str]], study: Any, out: Path, argv: list[str]
) -> str:
    """Run every grid point's comparison in `out` (finished runs skipped), write every report; return grid.md's table.

    `study` is the CompareConfig (variants, seeds, jobs, backend, threads; primary comparisons, metric and α for
    a point registered on its own). Every point's settings are checked before anything is written.
    """
    points = []
    for values in grid_points(grid):
        point_overrides = overrides | {key: grid_value(key, value) for key, value in values.items()}
        point_base = study_base(config, point_overrides, study.variants)
        points.append((values, out / point_label(values), point_base))
    base = resolve(config, overrides)
    identity = {"base": base, "grid": grid, "variants": study.variants, "seeds": study.seeds}
    threads = threads_per_run(study.jobs, study.threads)
    with folder_lock(out), contextlib.ExitStack() as locks:
        allowed = {"grid.md", "grid.png", *(folder.name for _, folder, _ in points)}
        claim_folder(out, GRID_FILE, identity, "a grid", allowed=allowed, growable=GROWABLE, kept=("results",))
        pending = []
        for _, folder, point_base in points:
            locks.enter_context(folder_lock(folder))
            plan = study_plan(point_base, study.variants, study.seeds, study.primary, study.primary_metric, study.alpha)
            check_registered(folder, plan)  # a point registered on its own keeps its plan
            claim_study(folder, point_base, study.variants, study.seeds)
            pending += plan_runs(folder, point_base, study.variants, study.seeds, threads, f"{folder.name}/")
        run_jobs(pending, study.jobs, train_settings if study.keep_weights else train_keeping_records, study.backend)
        for values, folder, point_base in points:
            write_compare_report(folder, collect(folder), point_command(argv, values, folder), point_base)
        return write_grid_summary(out, "lopti compare " + shlex.join(argv))


def grid_results(out: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Return per grid point and variant: finished seeds, held-out accuracy (mean, std) and the collapsed runs,
    from each point's results.json (points without one are left out)."""
    points = {}
    for values in grid_points(identity["grid"]):
        path = out / point_label(values) / "results.json"
        if not path.exists():
            continue
        runs = json.loads(path.read_text())["runs"]
        variants = {}
        for variant in identity["variants"]:
            mine = {name: run for name, run in runs.items() if run["variant"] == variant}
            if not mine:
                continue
            fallen = sorted(name for name, run in mine.items() if collapsed(run))
            variants[variant] = {
                "seeds": len(mine),
                "accuracy": mean_std([run["after"]["overall"]["accuracy"] for run in mine.values()]),
                "collapsed": len(fallen) / len(mine),
                "collapsed_runs": fallen,
            }
        points[point_label(values)] = {"values": values, "variants": variants}
    return {"points": points}


def grid_table(identity: dict[str, Any], results: dict[str, Any]) -> str:
    """Return grid.md's table: a row per variant, a column per grid point."""
    labels = [point_label(values) for values in grid_points(identity["grid"])]
    lines = ["| variant | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for variant in identity["variants"]:
        cells = []
        for label in labels:
            stats = results["points"].get(label, {}).get("variants", {}).get(variant)
            if stats is None:
                cells.append("–")
                continue
            mean, std = stats["accuracy"]
            fallen = len(stats["collapsed_runs"])
            cells.append(f"{100 * mean:.1f} ± {100 * std:.1f} ({fallen}/{stats['seeds']} collapsed)")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _numbers(texts: list[str]) -> list[float] | None:
    try:
        return [float(text) for text in texts]
    except ValueError:
        return None


def plot_grid(out: Path, identity: dict[str, Any], results: dict[str, Any]) -> Path | None:
    """Plot held-out accuracy (mean, error bar = std over seeds) against the first swept key, a line per
    variant; a panel per combination of the other keys. The x axis is logarithmic when every value is
    positive and they span at least 10× (learning rates). Return grid.png, or None when nothing finished."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(identity["grid"])
    swept, texts = keys[0], identity["grid"][keys[0]]
    numbers = _numbers(texts)
    xs = numbers or list(range(len(texts)))
    panels = list(itertools.product(*(identity["grid"][key] for key in keys[1:])))
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    drawn = False
    for axis, rest in zip(axes[0], panels, strict=True):
        fixed = dict(zip(keys[1:], rest, strict=True))
        for variant in identity["variants"]:
            line = []
            for x, text in zip(xs, texts, strict=True):
                values = {key: ({swept: text} | fixed)[key] for key in keys}
                stats = results["points"].get(point_label(values), {}).get("variants", {}).get(variant)
                if stats:
                    line.append((x, 100 * stats["accuracy"][0], 100 * stats["accuracy"][1]))
            if line:
                x, mean, std = zip(*line, strict=True)
                axis.errorbar(x, mean, yerr=std, marker="o", capsize=3, label=variant)
                drawn = True
        if numbers and min(numbers) > 0 and max(numbers) >= 10 * min(numbers):
            axis.set_xscale("log")
        if numbers is None:
            axis.set_xticks(xs, texts)
        axis.set_xlabel(swept)
        axis.set_ylabel("held-out accuracy (%)")
        axis.set_title(point_label(fixed))
        axis.legend(fontsize=8)
    figure.tight_layout()
    path = out / "grid.png"
    if drawn:
        figure.savefig(path, dpi=110)
    plt.close(figure)
    return path if drawn else None


def write_grid_summary(out: Path, command: str) -> str:
    """Write the grid's results into grid.json, grid.md and grid.png from its points' results.json; return
    the table."""
    identity = {k: v for k, v in json.loads((out / GRID_FILE).read_text()).items() if k != "results"}
    results = grid_results(out, identity)
    write_atomic(out / GRID_FILE, json.dumps({**identity, "results": results}, indent=1, sort_keys=True))
    table = grid_table(identity, results)
    figure = plot_grid(out, identity, results)
    parts = [
        f"# Grid over {', '.join(identity['grid'])}",
        "",
        f"Command: `{command}`",
        "",
        "Held-out accuracy after RL (greedy), mean ± std over seeds, in %; a run collapsed when its held-out "
        f"accuracy fell below its warm start's or its format errors exceeded {COLLAPSE_FORMAT_ERROR:.0%}:",
        "",
        table,
    ]
    if figure:
        parts += [f"![accuracy against {next(iter(identity['grid']))}]({figure.name})", ""]
    links = [f"[{label}]({label}/results.md)" for label in results["points"]]
    parts.append("Each point's table and curves: " + (", ".join(links) or "none finished yet") + ".")
    (out / "grid.md").write_text("\n".join(parts) + "\n")
    return table
