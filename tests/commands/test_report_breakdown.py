"""Held-out results broken down by the task's categories: `summarise` tables each breakdown key (math's operation)
with the accuracy's interval, and report.md's "Where the gain is" gives each category's change before → after with
its interval paired by prompt."""

import json
import statistics

import pytest

from lopti.commands.report import gain_table, write_report
from lopti.evaluation.scoring import summarise


def evaluation(correct: dict[str, list[bool]]) -> dict:
    """Return a greedy evaluation of level-1 prompts whose ids name their operation ("addition-0", ...)."""
    records = [
        {"id": f"{operation}-{i}", "group": 1, "categories": {"operation": operation}, "correct": [right],
         "well_formed": [True], "length": [10]}
        for operation, rights in correct.items()
        for i, right in enumerate(rights)
    ]  # fmt: skip
    return summarise(records, "level", samples=1, temperature=0.0) | {"records": records}


def test_each_breakdown_key_is_tabled_with_the_accuracys_interval():
    result = evaluation({"addition": [True, True, False, True], "subtraction": [False, False, True]})
    addition, subtraction = (
        result["breakdown"]["operation"]["addition"],
        result["breakdown"]["operation"]["subtraction"],
    )
    assert (addition["n"], addition["accuracy"]) == (4, 0.75) and (subtraction["n"], subtraction["accuracy"]) == (
        3,
        1 / 3,
    )
    assert result["per_group"]["1"]["n"] == 7 == result["overall"]["n"]
    low, high = addition["accuracy_interval"]
    half = 1.959964 * statistics.stdev([1, 1, 0, 1]) / 2
    assert low == pytest.approx(0.75 - half) and high == pytest.approx(0.75 + half)


def test_the_gain_table_gives_each_operations_change_with_its_paired_interval():
    before = evaluation({"addition": [False, False, True, False], "subtraction": [False, False, True]})
    after = evaluation({"addition": [True, True, True, False], "subtraction": [False, False, True]})
    table = gain_table(before, after)
    assert "| level |" not in table  # a single level is the overall figure again
    changes = [1, 1, 0, 0]
    half = 1.959964 * statistics.stdev(changes) / 2
    assert (
        f"| addition | 4 | 25.0% | 75.0% | +50.0 pts [{100 * (0.5 - half):+.1f}, {100 * (0.5 + half):+.1f}] |" in table
    )
    assert "| subtraction | 3 | 33.3% | 33.3% | +0.0 pts [+0.0, +0.0] |" in table


def test_the_report_says_where_the_gain_is_and_an_evaluation_without_records_has_no_such_section(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    before = evaluation({"addition": [False, True], "subtraction": [False, False]})
    after = evaluation({"addition": [True, True], "subtraction": [False, True]})
    report = write_report(tmp_path, before, after, {"train": 1.0}, "GRPO").read_text()
    assert "## Where the gain is" in report and "| addition | 2 | 50.0% | 100.0% | +50.0 pts" in report
    bare = {key: value for key, value in after.items() if key != "records"}
    assert "Where the gain is" not in write_report(tmp_path, before, bare, {"train": 1.0}, "GRPO").read_text()
