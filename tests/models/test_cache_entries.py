"""The embedded-model cache says why it rebuilds an entry, refuses an entry that is a file before building,
and removes the staging folders of builds that were killed."""

import subprocess
import sys

import pytest

from lopti.models import embedded


def builder(calls):
    def build(folder):
        calls.append(folder)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights" * 100)

    return build


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncate", "model.safetensors has 10 bytes, the manifest says 700"),
        ("flip", "model.safetensors does not match its hash in the manifest"),
        ("manifest", "lopti_manifest.json is missing or unreadable (a build that did not finish)"),
        ("missing", "model.safetensors is missing"),
    ],
)
def test_a_damaged_entry_is_rebuilt_saying_why(damage, reason, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))
    calls = []
    folder = embedded.cached("m", builder(calls))
    assert capsys.readouterr().err == ""  # a first build is no news
    weights = folder / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:10])
    elif damage == "flip":
        weights.write_bytes(b"X" + weights.read_bytes()[1:])
    elif damage == "manifest":
        (folder / embedded.MANIFEST).unlink()
    else:
        weights.unlink()
    assert embedded.cached("m", builder(calls)) == folder and len(calls) == 2
    assert capsys.readouterr().err == f"lopti: cache entry {folder} is damaged ({reason}); building it again\n"


def test_an_entry_that_is_a_file_is_refused_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))
    (tmp_path / f"m-v{embedded.BUILD_VERSION}").write_text("not a folder")
    calls = []
    with pytest.raises(ValueError, match=r"cache entry .*/m-v\d+ is a file, not a model folder; delete it"):
        embedded.cached("m", builder(calls))
    assert calls == []


def test_staging_folders_of_killed_builds_are_removed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = tmp_path / f".m.pid{int(dead.stdout)}.x1y2z3"  # a build killed with SIGKILL: no `finally` ran
    older = tmp_path / ".m-abcd1234"  # how lopti named them before it recorded the builder's process
    running = tmp_path / f".m.pid{embedded.os.getpid()}.q9w8e7"  # a build still going on
    other = tmp_path / ".m2.pid1.abcdef"  # another entry's
    for folder in (killed, older, running, other):
        (folder / "sft-work").mkdir(parents=True)
    embedded.cached("m", builder([]))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted([running.name, other.name])
    assert f"removed 2 staging folder(s) left in {tmp_path} by an interrupted build" in capsys.readouterr().err
