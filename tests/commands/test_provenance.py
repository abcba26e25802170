"""A run's code version: the clone's commit and whether lopti/ differs from it, or nothing from an installed copy; a
process keeps the one it loaded."""

import subprocess

import lopti
from lopti.commands import provenance


def test_from_the_clone_the_version_is_its_commit_and_whether_lopti_changed():
    head = subprocess.run(["git", "-C", str(provenance.SOURCE), "rev-parse", "HEAD"], capture_output=True, text=True)
    changes = subprocess.run(
        ["git", "-C", str(provenance.SOURCE), "status", "--porcelain", "--untracked-files=no", "lopti"],
        capture_output=True, text=True,
    )  # fmt: skip
    version = provenance.read_code_version()
    assert version["lopti"] == lopti.__version__
    if head.returncode:  # lopti installed from a wheel: no clone to name
        assert version["commit"] is None and version["modified"] is None
    else:
        assert version["commit"] == head.stdout.strip() and len(version["commit"]) == 40
        assert version["modified"] == bool(changes.stdout.strip())


def test_an_installed_copy_outside_any_clone_names_no_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "SOURCE", tmp_path)
    assert provenance.read_code_version() == {"lopti": lopti.__version__, "commit": None, "modified": None}


def test_a_folder_inside_another_repository_is_not_taken_for_lopti_s_clone(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "site-packages").mkdir()
    monkeypatch.setattr(provenance, "SOURCE", tmp_path / "site-packages")  # a venv inside a user's own repository
    assert provenance.read_code_version()["commit"] is None


def test_a_process_keeps_the_version_it_loaded_when_the_clone_moves_on(monkeypatch):
    loaded = provenance.code_version()
    monkeypatch.setattr(provenance, "SOURCE", provenance.SOURCE / "no-such-folder")
    assert provenance.read_code_version()["commit"] is None and provenance.code_version() == loaded
