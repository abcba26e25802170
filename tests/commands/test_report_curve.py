"""report.md's training curve says how far it can be trusted: a moving mean with its 95% band, and whether the
reward's trend over the batches is distinguishable from their noise."""

import json
import math

import pytest
from test_console import fake_eval_result  # pytest puts each test folder on sys.path

from lopti.commands.report import batch_noise, curve_window, reward_trend, write_report

# the default recipe's 8 batch rewards in one run: a zigzag with no trend to speak of
ZIGZAG = [0.344, 0.250, 0.125, 0.281, 0.219, 0.500, 0.219, 0.438]


def test_the_zigzag_of_eight_batches_is_not_distinguishable_from_noise():
    sentence = reward_trend(ZIGZAG)
    # least squares by hand: x̄ = 3.5, Σ(x − x̄)² = 42, slope = Σ(x − x̄)(y − ȳ) / 42
    mean = sum(ZIGZAG) / 8
    slope = sum((x - 3.5) * (y - mean) for x, y in enumerate(ZIGZAG)) / 42
    assert f"{slope:+.3f} per batch" in sentence and "not distinguishable" in sentence and "8 batches" in sentence


def test_a_steady_climb_is_distinguishable_and_degenerate_runs_are_said_to_have_no_trend():
    climb = [0.1 + 0.05 * k + (0.02 if k % 2 else -0.02) for k in range(12)]
    assert "distinguishable from the batches' noise." in reward_trend(climb) and "not" not in reward_trend(climb)
    assert "no trend to test" in reward_trend([0.2, 0.4]) and "no trend to test" in reward_trend([0.5] * 5)


def test_the_window_is_a_tenth_of_the_run_and_the_noise_ignores_a_steady_trend():
    assert [curve_window(n) for n in (2, 8, 30, 200)] == [2, 3, 3, 20]
    assert batch_noise([0.0, 1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(0.5))  # the differences alone
    assert batch_noise([0.3, 0.5, 0.3, 0.5]) == pytest.approx(math.sqrt(0.02))


def test_the_report_states_the_trend_under_the_reward_table(tmp_path):
    lines = [{"step": step + 1, "reward": reward, "rewards/math/mean": reward} for step, reward in enumerate(ZIGZAG)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    evaluation = fake_eval_result({"1": [True, False]})
    report = write_report(tmp_path, evaluation, evaluation, {"train": 1.0}, "GRPO").read_text()
    assert "| step | reward | moving mean (3) |" in report and "not distinguishable" in report
    assert (tmp_path / "curves.png").stat().st_size > 1000
