"""Which machines a study's runs trained on, and whether held-out accuracy differs between them.

A study split over sittings may run on CPUs of different kinds (cloud machines of one name come with and without
AMX or AVX-512 BF16), whose bf16 kernels round differently: the same seed then trains to another policy, and even the
warm start may score differently. The report lists the machines and, where the runs of one variant trained on two
of them, tests the difference with a permutation test that shuffles the machine labels within each variant (the
variants' own effects stay out of it).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NOT_RECORDED = "not recorded"
PERMUTATIONS = 10_000


def machine_of(run_dir: Path) -> str:
    """Return what a run trained on, from its run.json: the GPU, or the CPU model with its kind (`cpu_kind`, or for
    records made before it, whether the CPU multiplies bf16 natively); NOT_RECORDED without a hardware record."""
    path = run_dir / "run.json"
    hardware = json.loads(path.read_text()).get("hardware") if path.is_file() else None
    if not hardware:
        return NOT_RECORDED
    if hardware.get("gpu"):
        return hardware["gpu"]
    kind = hardware.get("cpu_kind") or ("native bf16" if hardware.get("native_bf16") else "no native bf16")
    return f"{hardware['cpu']} ({kind})"


@dataclass(frozen=True)
class MachineDifference:
    """Held-out accuracy on machine `second` minus on `first`, within the variants that ran on both."""

    first: str
    second: str
    variants: list[str]
    mean: float  # the mean over those variants of (mean on second − mean on first)
    p_value: float  # two-sided, machine labels permuted within each variant


def machine_difference(
    runs: dict[str, dict[str, Any]], first: str, second: str, measure: str, seed: int = 0
) -> MachineDifference | None:
    """Compare `measure` (a run's key → accuracy) on two machines, within each variant with runs on both; None when
    no variant ran on both. `runs` maps a run's name to its "variant", "machine" and the measure."""
    strata = []
    for variant in sorted({run["variant"] for run in runs.values()}):
        values = [(run["machine"], run[measure]) for run in runs.values() if run["variant"] == variant]
        labels = np.array([machine == second for machine, _ in values if machine in (first, second)])
        scores = np.array([value for machine, value in values if machine in (first, second)], dtype=float)
        if labels.any() and not labels.all():
            strata.append((variant, labels, scores))
    if not strata:
        return None

    def statistic(label_sets: list[np.ndarray]) -> float:
        gaps = [scores[on_second].mean() - scores[~on_second].mean()
                for on_second, (_, _, scores) in zip(label_sets, strata, strict=True)]  # fmt: skip
        return float(np.mean(gaps))

    observed = statistic([labels for _, labels, _ in strata])
    rng = np.random.default_rng(seed)
    permuted = np.array([statistic([rng.permutation(labels) for _, labels, _ in strata]) for _ in range(PERMUTATIONS)])
    p_value = (1 + np.sum(np.abs(permuted) >= abs(observed) - 1e-12)) / (1 + PERMUTATIONS)
    return MachineDifference(first, second, [variant for variant, _, _ in strata], observed, float(p_value))


def machines_section(out: Path, results: dict[str, Any]) -> list[str]:
    """Return the report's lines on the machines the runs trained on and, where they mixed two, the test of the
    difference in warm-start and after-RL greedy accuracy between the two with the most runs."""
    runs = {
        name: {
            "variant": run["variant"],
            "machine": machine_of(out / "runs" / name),
            "before": run["before"]["overall"]["accuracy"],
            "after": run["after"]["overall"]["accuracy"],
        }
        for name, run in results["runs"].items()
    }
    counts = Counter(run["machine"] for run in runs.values())
    listed = [f"{machine}: {count} run{'s' * (count != 1)}" for machine, count in counts.most_common()]
    lines = ["Machines: " + "; ".join(listed) + "."]
    if len(counts) > 1:
        (first, _), (second, _) = counts.most_common(2)
        for measure, words in (("before", "warm start"), ("after", "after RL")):
            difference = machine_difference(runs, first, second, measure)
            if difference is None:
                lines.append(f"No variant ran on both {first} and {second}: their difference is not tested.")
                break
            lines.append(
                f"Greedy held-out accuracy {words}, {second} − {first}, within {len(difference.variants)} variants: "
                f"{round(100 * difference.mean, 1) + 0.0:+.1f} points, permutation p = {difference.p_value:.3f} "
                f"(machine labels shuffled within each variant, {PERMUTATIONS} permutations)."
            )
    return [*lines, ""]
