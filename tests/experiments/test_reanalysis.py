"""docs/reanalysis.md: every table in it is recomputed from the committed per-run records."""

from pathlib import Path

from lopti.experiments.reanalysis import reanalyse_all

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reanalysis.md"
STUDIES = [Path("results/ablation-varied-xeon"), Path("results/smollm2-math")]


def test_the_reanalysis_page_is_what_the_records_give(monkeypatch):
    monkeypatch.chdir(ROOT)
    recomputed = reanalyse_all(STUDIES)
    page = PAGE.read_text(encoding="utf-8")
    marker = "<!-- recomputed by:"
    assert page[page.index(marker) :] == recomputed


def test_the_headline_numbers_are_in_the_recomputed_tables(monkeypatch):
    monkeypatch.chdir(ROOT)
    recomputed = reanalyse_all(STUDIES)
    smollm2 = recomputed.split("## smollm2-math")[1].split("### sampled pass@4")[1]
    assert "| ar+lopti − grpo | 3 | -10.3 |" in smollm2 and "| 0.250 | 1.000 | 0 / 3 / 0 |" in smollm2
    varied = recomputed.split("## ablation-varied-xeon")[1].split("### sampled")[0]
    assert "| ar+lopti − lopti | 5 | +1.5 |" in varied and "| 0.062 | 0.250 | 5 / 0 / 0 |" in varied
