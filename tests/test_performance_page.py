"""docs/performance.md states only what its records hold: each figure on the page is recomputed here from the record
it cites (a run's report.md, config.yaml and run.json, what a bench printed, the shipped warm start's
warm_start.json, the GPU check's JSON), each setting from the file that sets it, and a number the page states
outside those phrases, its code spans and its links fails the check."""

from __future__ import annotations

import ast
import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "results"
SIZES = RESULTS / "default-first-run-sizes"
LEVERS = RESULTS / "default-first-run-levers"
TIED = RESULTS / "default-first-run-tied"
LATER = RESULTS / "default-seeds-tied"
# a number as the page writes it: not part of a name (bf16, SmolLM2-135M, H200) or of a longer number
NUMBER = re.compile(r"(?<![\w.\-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
NOT_FIGURES = re.compile(r"`[^`]*`|\]\([^)]*\)")  # code spans (commands, flags, paths) and link targets
NOTE = r"(?: \([^|\d]*\))?"  # a cell's note without a number: "(reused)", "(GGUF conversion included)"


def words(text: str) -> str:
    """Return `text` with its whitespace runs as single spaces, as the page's figures are matched."""
    return " ".join(text.split())


def phrase(*parts: str) -> str:
    """Return a pattern of literal parts; a part that is the pattern `NOTE` stays a pattern."""
    return "".join(part if part == NOTE else re.escape(part) for part in parts)


def report(run: Path) -> tuple[str, list[str]]:
    """Return a run's wall time and its four phases' seconds (setup, evaluation before, RL, evaluation after) as its
    report.md states them."""
    wall, phases = re.search(r"Wall time: (\d+) s \((.*)\)\.", (run / "report.md").read_text()).groups()
    return wall, [re.search(r"(\d+) s", part).group(1) for part in phases.split(" · ")]


def run_row(label: str, run: Path) -> str:
    """The table row of one run: its label, wall time, then each phase, each cell maybe with a note."""
    wall, phases = report(run)
    assert json.loads((run / "run.json").read_text())["global_step"] == 8, run  # the header's "RL (8 batches)"
    cells = [phrase(f" {seconds} s", NOTE, " |") for seconds in phases]
    return phrase(f"| {label} | {wall} s |") + "".join(cells)


def held_out(run: Path) -> str:
    """The held-out sizes a run's config.yaml sets, as the page writes them: "500 greedy, 200 × 2 sampled"."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    return f"{config['eval_puzzles']} greedy, {config['eval_sampled_prompts']} × {config['eval_samples']} sampled"


def bench_machine(printed: str) -> dict:
    """Return the machine a bench printed on its first line (a dict's repr)."""
    return ast.literal_eval(printed.splitlines()[0].split("}", 1)[0] + "}")


# each CPU's side-by-side first runs (bench/first_run.py): its record folder, the CPU as the table names it, and how
# the processes' times are introduced in the text after the table
FIRST_RUNS = {
    "avx512-bf16": ("AMD EPYC, AVX-512 BF16", "on the EPYC with AVX-512 BF16"),
    ".": ("Intel Xeon, native bf16", "on the Xeon"),
    "avx2": ("AMD EPYC, AVX2 only", "on the AVX2-only EPYC"),
}


def side_by_side(record: Path) -> tuple[dict, str, str, str]:
    """Return what bench/first_run.py printed into `record`: the machine, the seconds of the first variant's run and
    of the default's, and the default's ratio to the first."""
    printed = (record / "first_run.txt").read_text()
    old, new = re.findall(r"round 0: (\d+) s", printed)
    ratio = re.search(r"variant 1 \(the default\): \d+ s, (\d\.\d\d)x", printed).group(1)
    return bench_machine(printed), old, new, ratio


def cpu_label(machine: dict) -> str:
    """The CPU of a bench's or a run's machine as the table names it, from what the machine records."""
    name = machine["cpu"].replace("(R)", "").removesuffix(" Processor")
    kind = {"avx512_bf16": "AVX-512 BF16", "avx2": "AVX2 only"}.get(machine.get("cpu_kind"))
    return f"{name}, {kind or ('native bf16' if machine['native_bf16'] else 'no native bf16')}"


def first_run_figures() -> list[str]:
    """The default recipe's settings, each CPU's side-by-side first runs (bench/first_run.py's record and each run's
    report, in the precision `lopti train` chose there), the default's run alone on an AVX2-only CPU, and the
    evaluation ratios (bench/eval_sizes.py)."""
    recipe = yaml.safe_load((ROOT / "configs/math-smollm2-ar-cpu.yaml").read_text())
    batches, completions = recipe["max_steps"], recipe["per_device_train_batch_size"]
    default, samples = recipe["eval_puzzles"], recipe["eval_samples"]
    assert recipe["eval_sampled_prompts"] == default
    records = held_out(SIZES / "variant0")
    figures = [
        f"{batches} generated batches of {completions} completions) evaluates {default} held-out problems, greedy "
        f"and {samples} samples each, before and after RL",
        f"| RL ({batches} batches) |",
    ]
    rows, took, machines = [], [], []
    for folder, (label, named) in FIRST_RUNS.items():
        record = SIZES / folder
        machine, old, new, ratio = side_by_side(record)
        assert cpu_label(machine) == label, machine
        machines.append((machine["cores"], ".".join(machine["torch"].split(".")[:2])))
        for run in ("variant0", "variant1"):  # "in bf16 where the CPU multiplies it natively, in fp32 elsewhere"
            assert yaml.safe_load((record / run / "config.yaml").read_text())["bf16"] is machine["native_bf16"]
        took.append(f"{old} s and {new} s {named} ({ratio}×)")
        rows += [
            run_row(f"{label} | {records}", record / "variant0"),
            run_row(f"{label} | {held_out(record / 'variant1')} (the default)", record / "variant1"),
        ]
    alone = SIZES / "avx2-idle"  # the default's first run with nothing else on the cores
    hardware = json.loads((alone / "run.json").read_text())["hardware"]
    assert yaml.safe_load((alone / "config.yaml").read_text())["bf16"] is False
    rows.append(run_row(f"{cpu_label(hardware)} | {held_out(alone)} (the default, alone)", alone))
    figures.append("The processes took " + ", ".join(took))
    ((cores, torch),) = set(machines)
    figures.append(f"The CPU figures are from {cores} cores and torch {torch} CPU")
    evaluations = (SIZES / "eval_sizes.txt").read_text()
    assert cpu_label(bench_machine(evaluations)) == FIRST_RUNS["."][0]  # "The evaluation alone, on the Xeon"
    sizes = re.findall(r"greedy (\d+) / sampled 2 x (\d+): ([\d.]+) s \((\d\.\d\d)x", evaluations)
    (greedy, sampled, seconds, first), *others = sizes
    assert others[-1][:2] == (str(default), str(default))
    figures += [
        f"{seconds} s for {greedy}/{sampled} ({first}×)",
        *(f"{share}× for {greedy}/{sampled}" for greedy, sampled, _, share in others),
        f"the default's evaluations take {others[-1][3]}× the time of the records' sizes",
    ]
    return [re.escape(figure) for figure in figures] + rows


def current_figures() -> list[str]:
    """The default's first run beside lopti before its latest speed-up (bench/first_run.py's record) and that
    speed-up's ratios (bench/tied_groups.py); the first run beside lopti before three earlier speed-ups, with the
    held-out sizes it had then, and each of those speed-ups' ratio as its bench printed it; the default's later runs."""
    machine, before, now, ratio = side_by_side(TIED)
    assert cpu_label(machine) == "AMD EPYC, AVX-512 BF16"
    assert held_out(TIED / "variant0") == held_out(TIED / "variant1")  # the change is the only difference
    again = side_by_side(TIED / "again")
    assert again[0] == machine
    tied = (TIED / "tied_groups.txt").read_text()
    assert bench_machine(tied) == machine
    update = dict(re.findall(r"^(\d) of 4 groups tied: .*?, (\d\.\d\d)x", tied, re.M))
    earlier, old, new, levers = side_by_side(LEVERS)
    assert cpu_label(earlier) == cpu_label(machine)  # the same CPU kind
    for record in (TIED, LEVERS):  # "bf16"
        for run in ("variant0", "variant1"):
            assert yaml.safe_load((record / run / "config.yaml").read_text())["bf16"] is True

    def ratio_printed(name: str, label: str) -> str:
        printed = (LEVERS / name).read_text()
        assert bench_machine(printed) == earlier  # on the same machine as those first runs
        return re.search(re.escape(label) + r": (\d\.\d\d)x", printed).group(1)

    generation = ratio_printed("rollout_draws.txt", "generation, inverse CDF / generate's random numbers")
    batch = ratio_printed("rollout_draws.txt", "whole batch, inverse CDF / generate's random numbers")
    conversion = ratio_printed("smollm2_conversion.txt", "parsed once / transformers' own parses")
    head = ratio_printed("packed_head.txt", "from the first completion column / over every column")
    later = [report(LATER / f"bf16-seed{seed}") for seed in (1, 2, 3, 4)]
    assert all(phases[:2] == ["1", "0"] for _, phases in later)  # model and evaluation before RL from the cache
    walls, rl = sorted(int(wall) for wall, _ in later), sorted(int(phases[2]) for _, phases in later)
    figures = [
        f"From empty caches on {machine['cores']} cores of an AMD EPYC with AVX-512 BF16, bf16",
        f"The processes took {before} s and {now} s ({ratio}×); run again, [{again[1]} s and {again[2]} s]"
        f"(../results/default-first-run-tied/again/first_run.txt) ({again[3]}×)",
        f"({update['1']}×, {update['2']}× and {update['3']}× an update with 1, 2 and 3 of 4 groups tied",
        f"with the held-out sizes of then ({held_out(LEVERS / 'variant0')}), the processes took {old} s and {new} s "
        f"({levers}×",
        f"by inverse CDF ({generation}× a generated batch's generation, {batch}× the whole batch",
        f"parses the GGUF once ({conversion}×",
        f"from the first completion column ({head}× an update",
        f"took {walls[0]}–{walls[-1]} s (RL {rl[0]}–{rl[-1]} s: seeds 1–4",
    ]
    return [re.escape(figure) for figure in figures] + [
        run_row(f"before | {held_out(TIED / 'variant0')}", TIED / "variant0"),
        run_row(f"now | {held_out(TIED / 'variant1')} (the default)", TIED / "variant1"),
    ]


def warm_start_figures() -> list[str]:
    """The shipped warm start: its SFT examples from its settings, and the time, machine and torch of its build."""
    from lopti.tasks.kk.data import parse_people

    record = json.loads((ROOT / "lopti/models/shipped/tiny/warm_start.json").read_text())
    settings = record["warm_start"]
    examples = len(parse_people(settings["people"])) * settings["puzzles_per_size"] * settings["copies"]
    examples += settings["answer_puzzles"]
    autocast = "under bf16 autocast" if settings["bf16"] else "in float32"
    assert record["stage_one_reused"]  # then "seconds" is stage 2's alone
    reused = re.search(r"--stage-one \S+", record["command"]).group(0)
    machine = record["machine"].split(", bf16 instructions")[0]
    return [
        re.escape(f"{examples:,} SFT examples in two stages {autocast}"),
        re.escape(f"{record['seconds']} s for stage 2 alone (stage 1 reused, `{reused}`) on an {machine}, ")
        + re.escape(f"torch {record['torch']}"),
    ]


def gpu_figures() -> list[str]:
    """The GPU check's settings from bench/gpu_check.py, its wheels from bench/gpu_wheels.sh, and its timings from
    the record; and the claim that the ratios lie within the round-to-round spread."""
    script = (ROOT / "bench/gpu_check.py").read_text()
    hidden, layers = re.search(r"else dict\(hidden_size=(\d+), layers=(\d+)", script).groups()
    completions, tokens = re.search(
        r"\(\s*dict\(per_device_train_batch_size=(\d+), num_generations=\d+, max_completion_length=(\d+)", script
    ).groups()
    alpha, steps = re.search(
        r'"ar\+lopti": \{"ar_alpha": ([\d.]+), "lopti": True, "num_iterations": (\d+)', script
    ).groups()
    batches = int(re.search(r'"--batches", type=int, default=(\d+)', script).group(1))
    wheels = [line for line in (ROOT / "bench/gpu_wheels.sh").read_text().splitlines() if not line.startswith("#")]
    pins = re.findall(r"\S+==\S+", "\n".join(wheels))
    record = json.loads((RESULTS / "gpu-check/h200-2026-12-04.json").read_text())
    runs = record["runs"]
    (rounds,) = {len(run["rounds"]) for run in runs.values()}
    (timed,) = {run["batches_timed"] / rounds for run in runs.values()}
    assert timed == batches - 1  # the first batch of each run is left out

    def row(label: str, name: str) -> str:
        run = runs[name]
        assert run["seconds_per_batch"] == pytest.approx(statistics.mean(run["rounds"]))
        cells = [f"{run['seconds_per_batch']:.3f}", ", ".join(f"{s:.3f}" for s in run["rounds"])]
        return f"| {label} | {' | '.join(cells)} | {run['completion_mean_length']:.1f} |"

    for faster, slower in (("grpo", "ar+lopti"), ("grpo", "trl")):  # "both within the round-to-round spread"
        difference = abs(runs[slower]["seconds_per_batch"] - runs[faster]["seconds_per_batch"])
        assert all(difference < max(runs[n]["rounds"]) - min(runs[n]["rounds"]) for n in (faster, slower))
    figures = [
        f"a tiny random Qwen2 (hidden {hidden}, {layers} layers; {completions} completions of up to {tokens} tokens "
        f"per step)",
        f"as AR + Lopti (α = {alpha})",
        f"with network: {len(pins)} wheels into bench/gpu_wheels/",
        f"On one {record['device']}, {batches} batches per run, {timed:.0f} timed",
        f"s per generated batch (mean of {rounds} rounds)",
        row("TRL `GRPOTrainer`", "trl"),
        row("lopti, GRPO", "grpo"),
        row(f"lopti, AR + Lopti ({steps} optimizer steps per batch)", "ar+lopti"),
        f"AR + Lopti / GRPO is {record['ar_lopti_over_grpo']:.2f}× and lopti's GRPO / `GRPOTrainer` "
        f"{record['lopti_grpo_over_trl']:.2f}×, both within the round-to-round spread",
    ]
    return [re.escape(figure) for figure in figures]


# names, not measurements: phase 1 of Lopti's update
SETTINGS = [re.escape("phase 1's log-probs")]


def figures() -> list[str]:
    """Every figure the page states, each a pattern built from its record (or the file that sets it)."""
    return [
        *first_run_figures(),
        *current_figures(),
        *warm_start_figures(),
        *gpu_figures(),
        *SETTINGS,
    ]


def check_page(text: str) -> int:
    """Assert that `text` states each figure as its record has it, and no number besides (outside code spans and
    link targets). Return how many numbers were checked."""
    text = words(text)
    missing = [pattern for pattern in figures() if not re.search(pattern, text)]
    assert not missing, f"not on the page as the records have them: {missing}"
    covered = [match.span() for pattern in figures() for match in re.finditer(pattern, text)]
    covered += [match.span() for match in NOT_FIGURES.finditer(text)]
    numbers = list(NUMBER.finditer(text))
    loose = [
        text[max(0, number.start() - 30) : number.end() + 10]
        for number in numbers
        if not any(start <= number.start() and number.end() <= end for start, end in covered)
    ]
    assert not loose, f"numbers on the page that no record gives: {loose}"
    return len(numbers)


def test_each_figure_on_the_performance_page_is_recomputed_from_its_record():
    assert check_page(PAGE.read_text()) > 60


@pytest.mark.parametrize(
    "right, wrong",
    [
        ("| 1.386 |", "| 1.385 |"),  # a GPU check mean
        ("1.06×", "1.07×"),  # a ratio the GPU check's record computes
        ("| 778 s |", "| 788 s |"),  # the AVX2 machine's default first run
        ("(0.62×)", "(0.61×)"),  # a ratio bench/first_run.py printed
        ("(0.84×)", "(0.83×)"),  # the latest speed-up's first run, from bench/first_run.py's record
        ("0.65× and 0.51×", "0.66× and 0.51×"),  # an update's ratio bench/tied_groups.py printed
        ("took 136–179 s", "took 136–178 s"),  # the later runs' wall times, from their reports
        ("(0.90× a generated", "(0.91× a generated"),  # a speed-up's ratio its bench printed
        ("0.49× for 150/150", "0.48× for 150/150"),  # an evaluation ratio of bench/eval_sizes.py
        ("66,000 SFT examples", "60,000 SFT examples"),  # the warm start's data, from its settings
        ("209 s for stage 2", "210 s for stage 2"),  # the warm start's build time
        ("19 wheels", "18 wheels"),  # the pinned wheels of bench/gpu_wheels.sh
        ("bench/gpu_wheels/ ", "bench/gpu_wheels/ (62.8 MiB) "),  # a figure no record holds
        ("(hidden 256, 4 layers;", "(hidden 256, 8 layers;"),  # a setting bench/gpu_check.py does not use
    ],
)
def test_a_performance_page_that_disagrees_with_its_record_fails(right, wrong):
    page = words(PAGE.read_text())
    assert right in page
    with pytest.raises(AssertionError):
        check_page(page.replace(right, wrong, 1))


def test_the_readmes_first_run_figure_is_the_benches_record():
    """The README's first run is the range of the reports of the default's runs in bench/first_run.py's two records on
    an AMD EPYC with AVX-512 BF16, and the report of the default's run alone on an AVX2-only CPU."""
    machine, _, _, _ = side_by_side(TIED)
    assert cpu_label(machine) == "AMD EPYC, AVX-512 BF16"
    walls = sorted(int(report(record / "variant1")[0]) for record in (TIED, TIED / "again"))
    avx2, _ = report(SIZES / "avx2-idle")
    readme = words((ROOT / "README.md").read_text())
    assert (
        f"A first run took {walls[0]}–{walls[1]} s (report, two runs) on 2 cores of an AMD EPYC with AVX-512 BF16; "
        f"{avx2} s in fp32 on 2 "
        "AVX2-only cores, before lopti's latest speed-ups" in readme
    )


def test_the_tiny_recipes_first_run_is_about_three_minutes():
    """The README and the getting-started page give the tiny K&K recipe's first run as about 3 minutes on 2 cores:
    bench/first_run.py's record of it, and the wall time of the run's own report."""
    record = ROOT / "results/kk-tiny-first-run"
    printed = (record / "first_run.txt").read_text()
    (seconds,) = re.findall(r"round 0: (\d+) s", printed)
    wall, _ = report(record / "run")
    assert f"Wall time: {wall} s" in printed and bench_machine(printed)["cores"] == 2
    minutes = round(int(seconds) / 60)
    assert f"AR + Lopti, about {minutes} minutes |" in (ROOT / "README.md").read_text()
    assert f"about {minutes} minutes on 2 cores" in (ROOT / "docs/getting-started.md").read_text()


def test_the_cli_guides_eval_figures_are_the_benches_record():
    """docs/guides/cli.md gives `lopti eval`'s CPU decoding against 🤗 generate as bench/eval_decoding.py printed it,
    and its greedy accuracy as the one before RL in the default's report on the same CPU; on a trained default run,
    `lopti eval` scored what the run's own evaluation after RL did."""
    printed = (ROOT / "results/eval-decoding/eval_decoding.txt").read_text()
    assert cpu_label(bench_machine(printed)) == "AMD EPYC, AVX-512 BF16"
    found = re.findall(r"^(\S+): ([\d.]+) s \(([\d.]+)x;.*accuracy ([\d.]+)%$", printed, re.M)
    rows = {variant: (seconds, ratio, accuracy) for variant, seconds, ratio, accuracy in found}
    (generate, _, generate_accuracy), (ours, ratio, accuracy) = rows["hf:false:64"], rows["auto:true:64"]
    assert rows["auto:false:64"][2] == generate_accuracy  # fp32: generate's greedy answers
    report = (LEVERS / "variant1" / "report.md").read_text()
    assert re.search(rf"\| greedy accuracy \(100 prompts\) \| {accuracy}% \|", report)
    trained = ROOT / "results/eval-decoding/trained"
    own, evaluated = (json.loads((trained / name).read_text())["overall"] for name in ("eval_after.json", "eval.json"))
    assert all(own[key] == evaluated[key] for key in ("accuracy", "length", "format_error", "n"))
    guide = words((ROOT / "docs/guides/cli.md").read_text())
    assert (
        f"that took {ours} s against {generate} s for 🤗 generate (`--backend hf`), {ratio}×, and gave the "
        f"report's {accuracy}%" in guide
    )
