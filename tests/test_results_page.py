"""docs/results.md and the README state only what the records under results/ hold: every table cell copied from a
study's results.md, every per-seed accuracy and RL time computed from its results.json and run.json files, and
every percentage in the prose found in that section's records."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from statistics import NormalDist

import pytest

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "results.md"
MARKER = re.compile(r"<!-- record: (\S+) -->")
ALSO = re.compile(r"<!-- also: (\S+) -->")  # a record a section's prose cites besides its tables' own
PERCENT = re.compile(r"(\d+\.\d+)(?:–(\d+\.\d+))?%")
RL_TIME = re.compile(r"RL took (\d+)–(\d+) s per run")


def normal(cell: str) -> str:
    """Return a table cell as the records write it (ASCII minus, no emphasis or code marks)."""
    return cell.replace("−", "-").replace("**", "").replace("`", "").strip()


def tables(text: str) -> list[list[list[str]]]:
    """Return the markdown tables of `text`: each a list of rows of cells, the header first, the rule left out."""
    found, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [normal(cell) for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def record_columns(record: Path) -> dict[str, dict[str, str]]:
    """Return {column header: {variant: cell}} over every table of a study's results.md; a header that two tables
    share (above / below / equal) keeps its first table's column."""
    columns: dict[str, dict[str, str]] = {}
    for header, *rows in tables(record.read_text()):
        for index, name in enumerate(header[1:], start=1):
            if name not in columns:
                columns[name] = {row[0]: row[index] for row in rows if len(row) == len(header)}
    return columns


def study_runs(record: Path) -> dict[str, dict] | None:
    """Return the runs of the study whose results.md is `record` (its results.json), or None without one."""
    path = record.parent / "results.json"
    return json.loads(path.read_text())["runs"] if record.name == "results.md" and path.is_file() else None


def per_seed(runs: dict[str, dict], variant: str) -> str:
    """Return a variant's greedy held-out accuracy after RL per seed, in %, as the page lists them."""
    seeds = sorted(run["seed"] for run in runs.values() if run["variant"] == variant)
    return ", ".join(f"{runs[f'{variant}-s{seed}']['after']['overall']['accuracy'] * 100:.1f}" for seed in seeds)


def record_percentages(records: list[Path]) -> set[str]:
    """Return every one-decimal number the records state: in their markdown and their runs' reports, every share in
    their JSON in %, and every share of their runs' own evaluations (overall, per group and per category) in %."""
    found: set[str] = set()
    for record in records:
        found |= set(re.findall(r"\d+\.\d", record.read_text()))
        for path in [record.parent / "results.json"] if study_runs(record) else []:
            found |= {f"{value * 100:.1f}" for value in _numbers(json.loads(path.read_text())) if 0 <= value <= 1}
        for path in record.parent.glob("runs/*/report.md"):
            found |= set(re.findall(r"\d+\.\d", path.read_text()))
        for path in record.parent.glob("runs/*/eval_*.json"):
            result = json.loads(path.read_text())
            shares = _numbers([result["overall"], result["per_group"], result.get("breakdown", {})])
            found |= {f"{value * 100:.1f}" for value in shares if 0 <= value <= 1}
    return found


def _numbers(tree) -> list[float]:
    if isinstance(tree, dict):
        return [number for value in tree.values() for number in _numbers(value)]
    if isinstance(tree, list):
        return [number for value in tree for number in _numbers(value)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def sections(text: str) -> list[str]:
    """Return the page's "## " sections."""
    return re.split(r"^## ", text, flags=re.MULTILINE)[1:]


def finding_sections() -> list[tuple[str, list[Path]]]:
    """Return each section with its records: those of its tables, then those its prose cites (`ALSO`)."""
    return [
        (section, [ROOT / path for path in MARKER.findall(section) + ALSO.findall(section)])
        for section in sections(PAGE.read_text())
    ]


def check_tables(section: str, records: list[Path]) -> int:
    """Assert that each table after a `<!-- record: ... -->` marker in `section` is its record's: every cell under
    a header the record has, the per-seed column recomputed from results.json, and a stated RL time range from the
    runs' run.json. Return how many cells were checked."""
    checked = 0
    for path, block in zip(MARKER.findall(section), MARKER.split(section)[2::2], strict=True):
        record = ROOT / path
        columns, runs = record_columns(record), study_runs(record)
        header, *rows = tables(block)[0]
        for row in rows:
            variant = row[0]
            for name, cell in zip(header[1:], row[1:], strict=True):
                if name in columns:
                    assert cell == columns[name].get(variant, "–"), (path, variant, name)
                else:
                    assert name.startswith("greedy after, seeds") and runs, f"{path}: no column {name!r}"
                    assert cell == per_seed(runs, variant), (path, variant)
                checked += 1
    for low, high in RL_TIME.findall(section):
        seconds = [
            json.loads(path.read_text())["train_seconds"]
            for record in records
            for path in (record.parent / "runs").glob("*/run.json")
        ]
        assert seconds and (low, high) == (f"{min(seconds):.0f}", f"{max(seconds):.0f}")
    return checked


FINDINGS = [item for item in finding_sections() if item[1]]
NAMES = [section.split("\n")[0][:50] for section, _ in FINDINGS]


@pytest.mark.parametrize("section, records", FINDINGS, ids=NAMES)
def test_each_table_cell_is_the_records(section, records):
    assert check_tables(section, records) > 0


@pytest.mark.parametrize("section, records", FINDINGS, ids=NAMES)
def test_each_percentage_in_the_prose_is_in_the_records(section, records):
    stated = {number for match in PERCENT.findall(section) for number in match if number}
    assert stated, "a finding without a percentage to check"
    missing = stated - record_percentages(records)
    assert not missing, f"not in {[str(record.relative_to(ROOT)) for record in records]}: {sorted(missing)}"


PLAN_ROW = re.compile(r"^\|.*\(\.\./(results/[^)]+/plan\.json)\), `([0-9a-f]{8})`(.*)\|$", re.MULTILINE)


def seed_range(seeds: list[int]) -> str:
    """Return consecutive seeds as the page writes them ("10–19"), others as a list."""
    consecutive = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}–{seeds[-1]}" if consecutive else ", ".join(map(str, seeds))


def plan_cells(plan: dict) -> list[str]:
    """Return the plan table's cells after the plan link for a committed plan.json: variants × seeds, the primary
    metric, the primary comparisons."""
    settings = plan["plan"]
    metric = {"sampled": f"sampled avg@{settings['data']['eval_samples']}", "greedy": "greedy"}
    comparisons = [comparison.replace(":", " - ") for comparison in settings["primary_comparisons"]]
    return [
        f"{', '.join(settings['variants'])} × {seed_range(settings['seeds'])}",
        metric[settings["primary_metric"]],
        ", ".join(comparisons),
    ]


def test_each_registered_plan_on_the_page_is_its_committed_plan():
    """The page's table of registered studies names each plan's hash, variants, seeds, metric and comparisons as
    the committed plan.json holds them."""
    rows = PLAN_ROW.findall(PAGE.read_text())
    assert len(rows) >= 2
    for path, short_hash, rest in rows:
        plan = json.loads((ROOT / path).read_text())
        assert plan["hash"].startswith(short_hash), path
        assert [normal(cell) for cell in rest.split("|")[1:]] == plan_cells(plan), path


def test_every_table_on_the_page_is_checked_against_records():
    """Each table follows a `<!-- record: ... -->` marker (its cells are the record's) or lists registered plans."""
    lines = PAGE.read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith("|") and not lines[number - 1].startswith("|"):
            before = next(text for text in reversed(lines[:number]) if text.strip())
            assert MARKER.search(before) or PLAN_ROW.search(lines[number + 2]), f"docs/results.md:{number + 1}"


def test_the_readme_states_the_results_pages_numbers():
    """The README's paragraph on results quotes percentages the results page's records hold, and links the page."""
    readme = (ROOT / "README.md").read_text()
    paragraph = readme.split("## What the results say", 1)[1].split("\n## ", 1)[0]
    assert "docs/results.md" in paragraph
    records = [record for _, found in finding_sections() for record in found]
    stated = {number for match in PERCENT.findall(paragraph) for number in match if number}
    assert stated - record_percentages(records) == set()


@pytest.mark.parametrize("wrong", ["41.6 [32.2, 50.8]", "37.2, 43.0, 44.3", "RL took 389–699 s per run"])
def test_a_page_that_disagrees_with_its_record_fails(wrong):
    """One cell, one per-seed value or one run time changed in the SmolLM2 section: the check fails."""
    section, records = next(item for item in FINDINGS if "smollm2-math" in str(item[1]))
    right = {"41.6": "41.5 [32.2, 50.8]", "37.2,": "37.2, 43.0, 44.2", "RL took": "RL took 389–698 s per run"}
    original = next(text for prefix, text in right.items() if wrong.startswith(prefix))
    assert original in section
    with pytest.raises(AssertionError):
        check_tables(section.replace(original, wrong, 1), records)


def test_the_readmes_first_run_paragraph_is_the_fifteen_bf16_runs_of_the_default():
    """The README's account of `lopti train`'s gains and lengths is the records of the fifteen bf16 runs of the
    default recipe (five in default-seeds, ten as the registered study's AR arm, which is the default)."""
    runs = [ROOT / f"results/default-seeds/bf16-seed{seed}" for seed in range(5)]
    runs += [ROOT / f"results/study-default/runs/ar-s{seed}" for seed in range(10, 20)]

    def overall(run: Path, name: str) -> dict:
        return json.loads((run / name).read_text())["overall"]

    def span(name: str, key: str, scale: float, digits: int) -> tuple[str, str]:
        """Return (the value before RL, one decimal; the range after, to `digits` decimals) over the runs."""
        (before,) = {round(scale * overall(run, f"eval_before{name}.json")[key], 1) for run in runs}
        after = [scale * overall(run, f"eval_after{name}.json")[key] for run in runs]
        return f"{before:.1f}", f"{min(after):.{digits}f}–{max(after):.{digits}f}"

    readme = " ".join((ROOT / "README.md").read_text().split())
    sampled, passed, greedy = (
        span("_sampled", "accuracy", 100, 0),
        span("_sampled", "pass@2", 100, 0),
        span("", "accuracy", 100, 0),
    )
    sizes = {(overall(run, "eval_after_sampled.json")["n"], overall(run, "eval_after.json")["n"]) for run in runs}
    assert sizes == {(200, 500)} and "Over 15 bf16 seeds (on a larger held-out set: 200 sampled, 500 greedy)" in readme
    assert f"sampled accuracy (avg@2, T = 0.7) rose from {sampled[0]}% to {sampled[1]}%" in readme
    assert f"pass@2 from {passed[0]}% to {passed[1]}%, greedy accuracy from {greedy[0]}% to {greedy[1]}%" in readme
    longer = sum(overall(run, "eval_after.json")["length"] > overall(run, "eval_before.json")["length"] for run in runs)
    length, sampled_length = span("", "length", 1, 1), span("_sampled", "length", 1, 1)
    assert f"greedy answers grew from {length[0]} to {length[1]} tokens (longer on {longer} of 15 seeds)" in readme
    assert f"sampled ones stayed near 40 ({sampled_length[1]})" in readme


def test_the_detectable_differences_are_the_default_studys():
    """What the registered study on the default recipe could detect against GRPO (80% power, uncorrected and at
    Holm's first step over its 5 primary comparisons), and the seeds a one-point difference would need, as the
    README and the results page state them."""
    from lopti.experiments.statistics import detectable_difference

    study = ROOT / "results/study-default"
    runs = json.loads((study / "results.json").read_text())["runs"]
    sampled = {
        (run["variant"], run["seed"]): json.loads((study / "runs" / name / "eval_after_sampled.json").read_text())
        for name, run in runs.items()
    }
    seeds = sorted({seed for _, seed in sampled})

    def spread(variant: str) -> float:
        differences = [100 * (sampled[variant, s]["overall"]["accuracy"] - sampled["grpo", s]["overall"]["accuracy"])
                       for s in seeds]  # fmt: skip
        return statistics.stdev(differences)

    spreads = [spread(variant) for variant in ("ar", "lopti", "ar+lopti")]
    plain = [detectable_difference(s, len(seeds)) for s in spreads]
    holm = [detectable_difference(s, len(seeds), alpha=0.05 / 5) for s in spreads]
    needed = ((NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)) * spreads[0]) ** 2  # AR − GRPO, 1 point
    readme, page = (" ".join((ROOT / path).read_text().split()) for path in ("README.md", "docs/results.md"))
    for text in (readme, page):
        assert f"detect {min(plain):.1f}–{max(plain):.1f} points at 80% power" in text
        assert f"({min(holm):.1f}–{max(holm):.1f} at Holm's first step)" in text
    assert round(needed, -2) == 200 and "one-point math gain would need ~200" in readme
    assert "a one-point gain would need ~200 seeds" in page


def page_words() -> str:
    return " ".join(PAGE.read_text().split())


def overall(run: Path, name: str) -> dict:
    return json.loads((run / name).read_text())["overall"]


def test_the_default_seeds_greedy_answers_grow_as_their_records_say():
    """The default recipe's five bf16 seeds: greedy answers longer after RL on every seed, by the evaluations."""
    runs = [ROOT / f"results/default-seeds/bf16-seed{seed}" for seed in range(5)]
    (before,) = {f"{overall(run, 'eval_before.json')['length']:.1f}" for run in runs}
    after = [overall(run, "eval_after.json")["length"] for run in runs]
    assert all(length > float(before) for length in after)
    assert f"greedy ones grow from {before} to {min(after):.1f}–{max(after):.1f}" in page_words()


def test_the_split_studys_malformed_and_collapsed_runs_are_its_records():
    """The registered split study: the runs whose greedy answers grew long are those with over 5% of them malformed,
    fewer than the collapse criterion counts, which adds the runs that end below the warm start."""
    runs = json.loads((ROOT / "results/study-varied-split/results.json").read_text())["runs"].values()
    (before,) = {f"{run['before']['overall']['length']:.1f}" for run in runs}
    malformed = [run["after"]["overall"] for run in runs if run["after"]["overall"]["format_error"] > 0.05]
    long = [run for run in runs if run["after"]["overall"]["length"] > 100]
    below = [run for run in runs if run["after"]["overall"]["accuracy"] < run["before"]["overall"]["accuracy"]]
    collapsed = len(malformed) + sum(run["after"]["overall"]["format_error"] <= 0.05 for run in below)
    lengths, errors = [run["length"] for run in malformed], [100 * run["format_error"] for run in malformed]
    assert len(long) == len(malformed) and all(run["after"]["overall"] in malformed for run in long)
    page = page_words()
    long_answers = f"{min(lengths):.0f}–{max(lengths):.0f} after in {len(malformed)} of the {len(runs)} runs"
    assert f"greedy answers of {before} tokens before RL, {long_answers}" in page
    assert f"in those {len(malformed)} runs {min(errors):.1f}–{max(errors):.1f}% of the greedy traces end" in page
    assert f"with the {len(below)} runs whose greedy accuracy ends below the warm start's" in page
    assert f"the criterion counts {collapsed} of the {len(runs)} runs as collapsed" in page


def test_bf16_seed_0_of_two_code_versions_is_stated_as_its_records():
    """The default recipe's bf16 seed 0 trained by two versions of lopti: other rollouts from the first batch, other
    accuracies (its report against the table of bf16 seeds); fp32 seed 0 the same in both."""
    later, earlier = ROOT / "results/default-decomposition/runs/rl-8-batches-seed0", ROOT / "results/default-seeds"

    def rewards(run: Path) -> list:
        return [json.loads(line).get("reward") for line in (run / "metrics.jsonl").read_text().splitlines()]

    text = (later / "report.md").read_text()
    sampled, greedy = (
        re.search(rf"\| {row}.*?\| [\d.]+% \| ([\d.]+)% \|", text).group(1) for row in (r"\*\*sampled", "greedy")
    )
    assert abs(float(sampled) - 100 * overall(later, "eval_after_sampled.json")["accuracy"]) <= 0.05
    table = record_columns(earlier / "results.md")
    table_sampled, table_greedy = (table[name]["bf16-seed0"].split(" → ")[1] for name in ("sampled avg@2", "greedy"))
    page = page_words()
    assert f"(training reward {rewards(later)[0]:.3f} against {rewards(earlier / 'bf16-seed0')[0]:.3f})" in page
    stated = f"ends at {sampled}% sampled and {greedy}% greedy by its report, against {table_sampled}% and "
    assert stated + f"{table_greedy}% in the table of bf16 seeds above" in page
    fp32 = [ROOT / "results/default-first-run-fp32", earlier / "fp32-seed0"]
    assert rewards(fp32[0]) == rewards(fp32[1])
    for name in ("eval_before.json", "eval_after.json", "eval_before_sampled.json", "eval_after_sampled.json"):
        assert overall(fp32[0], name) == overall(fp32[1], name)
    assert "seed 0 gives the same rewards and accuracies in both versions" in page


def test_the_dose_studys_claim_is_its_record():
    """The dose–response section's slope, its interval, seeds up and down, p and detectable slope, the unclipped
    arm's difference, and the clipping facts are what results/ar-dose holds: its results.md, and its runs, whose
    α = 0.9 evaluations are the same in both arms wherever no step of them reached the clipping norm."""
    study = ROOT / "results/ar-dose"
    record = " ".join((study / "results.md").read_text().split())
    slope = re.search(
        r"norm1, (\d+) seeds with every α: slope of sampled avg@2 on α (\S+) \[(\S+), (\S+)\] points per unit α "
        r"\(95% bootstrap over seeds and problems\), (\d+) seeds up, (\d+) down; exact sign-flip p = ([\d.]+); "
        r"detectable at 80% power with this spread: ([\d.]+)",
        record,
    )
    unclipped = re.search(
        r"(\d+) seeds: (\S+) \[(\S+), (\S+)\] points, \d+ up / \d+ down, exact sign-flip p = ([\d.]+)\.", record
    )
    seeds, mean, low, high, up, down, p, detectable = slope.groups()
    page = page_words().replace("−", "-")
    assert (
        f"Over the {seeds} seeds, its slope on α (avg@2 at T = 0.7 on 200 held-out problems, each seed's least-squares "
        f"slope over its four runs) is {mean} points per unit α (95% interval [{low}, {high}] over seeds and problems; "
        f"{up} seeds up, {down} down; exact sign-flip p = {p})"
    ) in page
    assert f"would have found a slope of {detectable} points per unit α four times in five" in page
    count, difference, low, high, p = unclipped.groups()
    assert f"α = 0.9 against α = 0 is {difference} points [{low}, {high}] ({count} seeds, p = {p})" in page
    runs = json.loads((study / "summary.json").read_text())
    largest = max(run["grad_norm_max"] for run in runs if run["alpha"] == 0.9)

    def outcome(arm: str, seed: int) -> list:
        """Return a run's rewards and gradient norms per step, and its evaluations after RL as written."""
        folder = study / "runs" / f"{arm}-a0.9-s{seed}"
        steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        trained = [(step.get("reward"), step.get("grad_norm")) for step in steps]
        return [trained, *((folder / name).read_bytes() for name in ("eval_after.json", "eval_after_sampled.json"))]

    seeds_both = sorted({run["seed"] for run in runs if run["arm"] == "norm10" and run["alpha"] == 0.9})
    same = [outcome("norm10", seed) == outcome("norm1", seed) for seed in seeds_both]
    assert largest < 1.0 and all(same)
    assert f"the gradient norm stays below 1 (at most {largest:.3f})" in page
    assert f"the same rollouts, rewards and evaluations on each of the {len(same)} seeds" in page


def test_the_pages_counts_and_times_are_their_records():
    """Figures of the prose that are no percentage: the tiny model's size (its shipped weights), the registered default
    study's wall time and its GRPO and AR runs' share of clipped steps (their reports and metrics), the varied K&K
    recipe's RL time (its run.json)."""
    from safetensors import safe_open

    with safe_open(ROOT / "lopti/models/shipped/tiny/model.safetensors", "pt") as weights:
        parameters = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118
    size = f"{parameters / 1e6:.1f} M parameters"
    assert size in page_words() and size in (ROOT / "docs/getting-started.md").read_text()
    study = ROOT / "results/study-default/runs"
    recorded = [run for run in sorted(study.iterdir()) if "hardware" in json.loads((run / "run.json").read_text())]
    wall = [int(re.search(r"Wall time: (\d+) s", (run / "report.md").read_text())[1]) for run in recorded]
    minutes = sum(wall) / 60
    assert (
        f"the last {len(recorded)} runs took {minutes:.0f} minutes of wall time together by their reports "
        f"({minutes / len(recorded):.1f} minutes a run)"
    ) in page_words()

    def clipped(variant: str) -> float:
        steps = [json.loads(line) for run in study.glob(f"{variant}-s*") for line in (run / "metrics.jsonl").open()]
        norms = [step["grad_norm"] for step in steps if "grad_norm" in step]
        return 100 * sum(norm > 1.0 for norm in norms) / len(norms)

    assert f"default study's GRPO and AR runs ({clipped('grpo'):.0f}% and {clipped('ar'):.0f}%)" in page_words()
    varied = json.loads((ROOT / "results/kk-decomposition/kk-tiny-varied-seed0/run.json").read_text())
    assert f"the varied recipe's RL took {varied['train_seconds']:.0f} s" in page_words()


def test_the_default_studys_machine_comparison_is_its_record():
    """The page's account of the registered default study's machines: its results.md's test, the recorded runs'
    seeds and count."""
    study = ROOT / "results/study-default"
    record = (study / "results.md").read_text()
    machines = re.search(r"Machines: not recorded: (\d+) runs; AMD EPYC \(native bf16\): (\d+) runs\.", record)
    after = re.search(r"after RL, AMD EPYC \(native bf16\) − not recorded, .*?: ([+-][\d.]+) points, permutation "
                      r"p = ([\d.]+)", record)  # fmt: skip
    recorded = [
        run.name for run in (study / "runs").iterdir() if "hardware" in json.loads((run / "run.json").read_text())
    ]
    seeds = sorted({int(name.rsplit("-s", 1)[1]) for name in recorded})
    unrecorded, count = machines.groups()
    assert int(count) == len(recorded)
    assert (
        f"Those {count} runs, seeds {seeds[0]}–{seeds[-1]}, end {after[1]} points higher in greedy accuracy than the "
        f"other {unrecorded} within each variant (permutation p = {after[2]} in the study's results.md)"
    ) in page_words()
