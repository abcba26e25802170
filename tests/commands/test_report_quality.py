"""report.md draws the update-quality metrics (`update_quality_every`) when a run logged them, and only then."""

import json

from matplotlib.figure import Figure
from test_console import fake_eval_result  # pytest puts each test folder on sys.path

from lopti.commands.report import write_report
from lopti.diagnostics.plots import plot_update_quality

BUCKETS = ("[0.00,0.50)", "[0.50,1.00]", "all")


def quality_line(step: int, prefix: str, level: float) -> dict:
    """One log line of update-quality metrics as the trainer writes them, every value offset from `level`."""
    line = {"step": step, "loss": 0.1}
    for k, bucket in enumerate(BUCKETS):
        line[f"{prefix}correct_pos_{bucket}"] = level + 0.1 * k
        line[f"{prefix}correct_neg_{bucket}"] = level - 0.1 * k
        line[f"{prefix}dlogp_pos_{bucket}"] = 0.01
    return line


def test_report_draws_update_quality_with_lopti_phase1(tmp_path):
    lines = [{"step": 1, "loss": 0.2, "rewards/accuracy/mean": 0.3}]
    for step in (2, 4, 6):  # Lopti with update_quality_every: phase 1's numbers, then the final ones
        lines += [quality_line(step - 1, "quality/phase1/", 0.55), quality_line(step, "quality/", 0.6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    evaluation = fake_eval_result({"3": [True, False]})
    report = write_report(tmp_path, evaluation, evaluation, {"train": 1.0}, "GRPO + Lopti").read_text()
    assert "## Update quality during training" in report
    assert "![update quality](update_quality.png)" in report and "Lopti's phase 1" in report
    assert (tmp_path / "update_quality.png").stat().st_size > 1000


def test_report_without_quality_metrics_has_no_such_figure(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1, "quality/other": 1.0}) + "\n")
    evaluation = fake_eval_result({"3": [True, False]})
    report = write_report(tmp_path, evaluation, evaluation, {"train": 1.0}, "GRPO").read_text()
    assert "Update quality" not in report and not (tmp_path / "update_quality.png").exists()


def test_quality_plot_takes_step_series_and_dashes_phase1(tmp_path, monkeypatch):
    # plain {metric: {step: value}} data, as `lopti compare` holds per variant; unrelated metrics are ignored
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda figure, *args, **kwargs: (drawn.append(figure), save(figure, *args, **kwargs))
    )
    series = {
        "quality/correct_pos_all": {4: 0.7, 2: 0.6},
        "quality/phase1/correct_pos_all": {1: 0.4, 3: 0.5},
        "quality/correct_neg_[0.00,0.50)": {2: 0.8},
        "quality/dlogp_pos_all": {2: 0.01},
        "rewards/accuracy/mean": {2: 0.3},
    }
    assert plot_update_quality(series, tmp_path / "q.png", xlabel="RL step") == tmp_path / "q.png"
    positive, negative = drawn[0].axes
    lines = {(tuple(line.get_xdata()), line.get_linestyle()): tuple(line.get_ydata()) for line in positive.get_lines()}
    assert lines[(2, 4), "-"] == (0.6, 0.7) and lines[(1, 3), "--"] == (0.4, 0.5)
    assert [tuple(line.get_ydata()) for line in negative.get_lines() if line.get_linestyle() == "-"] == [(0.8,)]
    assert positive.get_xlabel() == "RL step"
    assert plot_update_quality({"quality/dlogp_pos_all": {2: 0.01}}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
