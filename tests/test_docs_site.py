"""The docs site builds with `mkdocs build --strict` (no broken link, anchor or reference), its API reference has
the public API with docstrings, docs/ holds documentation only, and the README stays short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text().splitlines()
# what a reader of the API reference must find there, page by page (anchors mkdocstrings gives each object)
API = {
    "train": ["lopti.train.LoptiGRPOTrainer", "lopti.train.LoptiGRPOConfig"],
    "cpu": ["lopti.cpu.CpuLoptiGRPOTrainer", "lopti.cpu.trainer_class"],
    "core": [
        "lopti.core.objective.token_objective",
        "lopti.core.advantages.grpo_advantages",
        "lopti.core.advantages.token_advantages",
        "lopti.core.reweight.ar_weights",
        "lopti.core.reweight.reweight_advantages",
        "lopti.core.isolation.phase_masks",
    ],
    "verl": ["lopti.integrations.verl.ar.compute_policy_loss_ar", "lopti.integrations.verl.phase_loss.lopti_ppo_loss"],
    "tasks": ["lopti.tasks.registry.TaskData", "lopti.tasks.kk.rewards"],
    "diagnostics": ["lopti.diagnostics.analyze.AnalyzeConfig"],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_api_reference_lists_the_public_api_with_docstrings(site):
    for page, names in API.items():
        html = (site / "reference" / page / "index.html").read_text()
        for name in names:
            assert f'id="{name}"' in html, f"{name} is not in reference/{page}"
            # the object's own block: from its heading to the next object's
            block = html.split(f'id="{name}"', 1)[1].split('<div class="doc doc-object', 1)[0]
            assert re.search(r'class="doc doc-contents.*?<p>\S', block, re.S), f"{name} has no docstring there"


def test_the_settings_tables_are_generated_from_the_dataclasses(site):
    """The CLI page's tables come from the dataclasses at build time: a field and its help text are there."""
    from lopti.train.config import LoptiGRPOConfig

    html = (site / "guides" / "cli" / "index.html").read_text()
    ar_alpha = LoptiGRPOConfig.__dataclass_fields__["ar_alpha"]
    assert "<code>ar_alpha</code>" in html and ar_alpha.metadata["help"].split(":")[0] in html


def test_the_records_are_published_beside_the_pages(site):
    assert (site / "results" / "smollm2-math" / "results.json").is_file()
    assert (site / "results" / "ablation-r6-curves.png").is_file()


def test_docs_holds_documentation_only():
    """Records live in results/; docs/ has pages (and the site's one script), no data, no progress diary."""
    for path in (ROOT / "docs").rglob("*"):
        if path.is_file():
            assert path.suffix == ".md" or path.relative_to(ROOT).as_posix() == "docs/javascripts/mathjax.js", path
            text = path.read_text()
            assert not re.search(r"^#+ Round \d", text, re.M), f"{path}: a 'Round N' section"
            assert "Not done" not in text, f"{path}: a goal tracker"


def test_the_readme_is_short_and_reaches_the_trl_snippet_early():
    assert len(README) <= 100
    assert any(line.startswith("from lopti.train import") for line in README[:50])


def test_the_readme_keeps_both_commands():
    """The set-up + `lopti train` line, and the set-up + tests line right after the CI marker (.ci/run reads it)."""
    assert any(line.startswith("python3 -m venv .venv") and line.endswith("&& lopti train") for line in README)
    marker = README.index("<!-- ci: test command -->")
    assert README[marker + 1] == "```bash" and README[marker + 2].startswith("python3 -m venv .venv")
    assert README[marker + 2].endswith("&& nox -s ci"), "every session of noxfile.py"
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'session.install("-e", ".[dev,docs]")' in noxfile, "the tests session needs mkdocs for this file"


def test_the_site_publishes_the_records_git_keeps_not_a_studys_weights(tmp_path):
    """results/ in the site: what git tracks or would track, not what it ignores (weights beside a study's records)."""
    sys.path.insert(0, str(ROOT))
    try:
        from mkdocs_hooks import records
    finally:
        sys.path.remove(str(ROOT))
    for name in ("results/study/results.md", "results/study/runs/s0/report.md", "results/study/runs/s0/final/w.bin"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / ".gitignore").write_text("results/**/final/\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "results/study/results.md"], check=True)
    published = [path.relative_to(tmp_path).as_posix() for path in records(tmp_path)]
    assert published == ["results/study/results.md", "results/study/runs/s0/report.md"]
    (tmp_path / ".git").rename(tmp_path / "not-git")  # an sdist: every file
    assert len(records(tmp_path)) == 3
