"""A study's machines: what each run trained on, from its run.json, and the test of the accuracy difference between
two machines within variants."""

import json

import pytest

from lopti.experiments.machines import NOT_RECORDED, machine_difference, machine_of, machines_section


def write_hardware(run_dir, hardware):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"train_seconds": 1.0} | ({"hardware": hardware} if hardware else {})))


@pytest.mark.parametrize(
    ("hardware", "machine"),
    [
        ({"cpu": "Intel Xeon", "cpu_kind": "amx", "native_bf16": True, "gpu": None}, "Intel Xeon (amx)"),
        ({"cpu": "AMD EPYC", "native_bf16": True, "gpu": None}, "AMD EPYC (native bf16)"),  # made before cpu_kind
        ({"cpu": "AMD EPYC", "native_bf16": False, "gpu": None}, "AMD EPYC (no native bf16)"),
        ({"cpu": "AMD EPYC", "cpu_kind": "avx2", "gpu": "NVIDIA H200"}, "NVIDIA H200"),
        (None, NOT_RECORDED),
    ],
)
def test_a_run_s_machine_is_its_gpu_or_its_cpu_and_kind(tmp_path, hardware, machine):
    write_hardware(tmp_path / "run", hardware)
    assert machine_of(tmp_path / "run") == machine
    assert machine_of(tmp_path / "never-ran") == NOT_RECORDED


def runs_on_two_machines(shift: float) -> dict:
    """Two variants (of different levels), four runs of each on each machine, `shift` higher on machine B."""
    runs = {}
    for variant, level in (("grpo", 0.2), ("ar", 0.6)):
        for k in range(8):
            machine = "B" if k % 2 else "A"
            noise = (k // 2 - 1.5) * 0.01
            runs[f"{variant}-s{k}"] = {"variant": variant, "machine": machine,
                                       "after": level + noise + (shift if machine == "B" else 0.0)}  # fmt: skip
    return runs


def test_a_shift_between_machines_is_found_within_variants_and_none_where_there_is_none():
    found = machine_difference(runs_on_two_machines(0.05), "A", "B", "after")
    assert found.mean == pytest.approx(0.05) and found.variants == ["ar", "grpo"] and found.p_value < 0.05
    # the variants' own difference (0.4) is not taken for a machine effect: machine labels move within variants
    none = machine_difference(runs_on_two_machines(0.0), "A", "B", "after")
    assert none.mean == pytest.approx(0.0) and none.p_value > 0.5
    apart = {name: run | {"machine": "A" if run["variant"] == "grpo" else "B"} for name, run in
             runs_on_two_machines(0.05).items()}  # fmt: skip
    assert machine_difference(apart, "A", "B", "after") is None  # no variant ran on both


def test_the_report_lists_the_machines_and_tests_their_difference_where_they_mixed(tmp_path):
    results = {"runs": {}}
    for name, run in runs_on_two_machines(0.05).items():
        cpu = {"A": {"cpu": "AMD EPYC", "cpu_kind": "avx512_bf16"}, "B": {"cpu": "AMD EPYC", "cpu_kind": "avx2"}}
        write_hardware(tmp_path / "runs" / name, cpu[run["machine"]] | {"gpu": None})
        evaluation = {"overall": {"accuracy": run["after"]}}
        results["runs"][name] = {"variant": run["variant"], "before": evaluation, "after": evaluation}
    lines = machines_section(tmp_path, results)
    assert lines[0] == "Machines: AMD EPYC (avx512_bf16): 8 runs; AMD EPYC (avx2): 8 runs."
    assert lines[2].startswith("Greedy held-out accuracy after RL, AMD EPYC (avx2) − AMD EPYC (avx512_bf16), within 2 ")
    assert "+5.0 points, permutation p = 0.0" in lines[2]
    one = {"runs": {"grpo-s0": results["runs"]["grpo-s0"]}}
    assert machines_section(tmp_path, one) == ["Machines: AMD EPYC (avx512_bf16): 1 run.", ""]
