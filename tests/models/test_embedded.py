"""The embedded models: a task's own come from its record; the cache: built once, reused, rebuilt when partial or
corrupt saying why, clear when unwritable; an entry that is a file is refused before building, and the staging
folders of killed builds are removed."""

import subprocess
import sys

import pytest

from lopti.models import embedded


def fake_builder(calls):
    def build(folder):
        calls.append(folder)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights" * 100)

    return build


def test_built_once_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))
    calls = []
    first = embedded.cached("m", fake_builder(calls))
    second = embedded.cached("m", fake_builder(calls))
    assert first == second and len(calls) == 1
    assert embedded.damage(first) is None
    assert not any(p.name.startswith(".m") for p in tmp_path.iterdir()), "no staging folder left behind"


def test_failed_build_leaves_nothing_usable(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))

    def broken(folder):
        (folder / "config.json").write_text("{}")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        embedded.cached("m", broken)
    assert not (tmp_path / f"m-v{embedded.BUILD_VERSION}").exists()
    assert not any(p.name.startswith(".m") for p in tmp_path.iterdir())


def test_cache_path_that_is_a_file_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LOPTI_CACHE", str(blocker / "cache"))
    with pytest.raises(PermissionError, match=r"is not writable.*set LOPTI_CACHE"):
        embedded.cache_root()


def test_unknown_embedded_name():
    with pytest.raises(ValueError, match="unknown embedded model 'huge'"):
        embedded.embedded_model_path("huge")


def test_a_tasks_own_models_are_the_ones_its_record_names():
    from lopti.models.loading import EMBEDDED_MODELS
    from lopti.tasks.registry import get_task

    models = get_task("kk").models
    assert [embedded.model_task(name) for name in ("tiny", "tiny-varied", "tiny-base")] == ["kk"] * 3
    assert embedded.model_task("smollm2-135m") is None  # a general model: no task's own
    assert set(embedded.WARM_STARTED) == set(models.warm_started)
    assert embedded.BUILDERS["tiny-base"] is models.build_base
    assert EMBEDDED_MODELS == ("tiny", "tiny-varied", "tiny-base", "smollm2-135m")  # as `--help` lists them


def test_another_warm_start_is_another_cache_entry(monkeypatch):
    from lopti.tasks.kk.warmstart import WarmStartConfig

    default = embedded.warm_start_key("tiny")
    assert embedded.warm_start_key("tiny-varied") != default
    monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig())
    assert embedded.warm_start_key("tiny") == default
    monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig(trace_share=0.25))
    assert embedded.warm_start_key("tiny") != default


def test_a_test_warm_start_keeps_each_models_own_settings(monkeypatch):
    from lopti.tasks.kk.warmstart import WarmStartConfig

    monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig(puzzles_per_size=10))
    varied = embedded.warm_start_config("tiny-varied")
    assert (varied.puzzles_per_size, varied.trace_form) == (10, "varied")
    assert embedded.warm_start_config("tiny").trace_form == "plain"


def fake_shipped(folder, settings):
    """Write a whole shipped folder made with `settings` (a WarmStartConfig as a dict)."""
    import json

    folder.mkdir(parents=True)
    fake_builder([])(folder)
    (folder / "warm_start.json").write_text(json.dumps({"warm_start": settings}))
    embedded.write_manifest(folder)
    return folder


@pytest.mark.parametrize("name", list(embedded.WARM_STARTED))
def test_the_default_warm_start_is_the_shipped_folder_and_nothing_is_built(tmp_path, monkeypatch, name):
    from dataclasses import asdict

    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "SHIPPED", tmp_path / "shipped")
    fake_shipped(tmp_path / "shipped" / name, asdict(embedded.warm_start_config(name)))
    monkeypatch.setitem(embedded.BUILDERS, name, lambda folder: pytest.fail("built instead of shipped"))
    assert embedded.embedded_model_path(name) == tmp_path / "shipped" / name


@pytest.mark.parametrize("case", ["other-settings", "another-models-settings", "damaged", "a-test-warm-start"])
def test_a_shipped_folder_that_does_not_match_the_code_is_not_used(tmp_path, monkeypatch, capsys, case):
    from dataclasses import asdict

    from lopti.tasks.kk.warmstart import WarmStartConfig

    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    settings = {
        "other-settings": WarmStartConfig(trace_share=0.5),
        "another-models-settings": embedded.warm_start_config("tiny-varied"),
    }.get(case, WarmStartConfig())
    shipped = fake_shipped(tmp_path / "shipped" / "tiny", asdict(settings))
    if case == "damaged":
        (shipped / "model.safetensors").write_bytes(b"cut")
    if case == "a-test-warm-start":
        monkeypatch.setattr(embedded, "WARM_START", WarmStartConfig(puzzles_per_size=10))
    monkeypatch.setattr(embedded, "SHIPPED", tmp_path / "shipped")
    calls = []
    monkeypatch.setitem(embedded.BUILDERS, "tiny", fake_builder(calls))
    folder = embedded.embedded_model_path("tiny")
    assert folder.parent == tmp_path / "cache" and len(calls) == 1
    assert ("damaged" in capsys.readouterr().err) == (case == "damaged")


@pytest.mark.parametrize("name", list(embedded.WARM_STARTED))
def test_the_shipped_warm_start_is_whole_and_made_with_the_codes_settings(name):
    """Fails when a warm start's settings change without rebuilding its shipped weights (bench/warm_start.py)."""
    import json
    from dataclasses import asdict

    folder = embedded.SHIPPED / name
    assert embedded.damage(folder) is None
    record = json.loads((folder / "warm_start.json").read_text())
    assert record["warm_start"] == asdict(embedded.warm_start_config(name))
    assert embedded.shipped_model(name) == folder


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
    folder = embedded.cached("m", fake_builder(calls))
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
    assert embedded.damage(folder) is not None
    assert embedded.cached("m", fake_builder(calls)) == folder and len(calls) == 2
    assert embedded.damage(folder) is None
    assert capsys.readouterr().err == f"lopti: cache entry {folder} is damaged ({reason}); building it again\n"


def test_an_entry_that_is_a_file_is_refused_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path))
    (tmp_path / f"m-v{embedded.BUILD_VERSION}").write_text("not a folder")
    calls = []
    with pytest.raises(ValueError, match=r"cache entry .*/m-v\d+ is a file, not a model folder; delete it"):
        embedded.cached("m", fake_builder(calls))
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
    embedded.cached("m", fake_builder([]))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted([running.name, other.name])
    assert f"removed 2 staging folder(s) left in {tmp_path} by an interrupted build" in capsys.readouterr().err


def test_a_conversion_shows_one_bar_to_its_end_with_transformers_bars_off_meanwhile(monkeypatch):
    import tqdm.auto
    from transformers import modeling_gguf_pytorch_utils as gguf_loading
    from transformers.utils import logging as transformers_logging

    shown = []

    class Bar:  # what tqdm is asked to draw, and how far it got
        def __init__(self, **settings):
            self.settings, self.n = settings, 0
            shown.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, amount):
            self.n += amount
            assert not transformers_logging.is_progress_bar_enabled(), "transformers' bars must be off meanwhile"
            assert gguf_loading.tqdm.keywords == {"disable": True}, "and its GGUF bar, which draws even into a log file"

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    transformers_logging.enable_progress_bar()
    gguf_bar = gguf_loading.tqdm
    with embedded.conversion_progress("converting", embedded.SMOLLM2_STEPS) as done:
        for step in embedded.SMOLLM2_STEPS:
            done(step)
    (bar,) = shown
    assert bar.n == bar.settings["total"] and bar.settings["disable"] is None  # quiet where output is no terminal
    assert transformers_logging.is_progress_bar_enabled()  # as it was before
    assert gguf_loading.tqdm is gguf_bar


def test_the_smollm2_conversion_parses_the_gguf_once_and_gives_back_gguf_s_own_names(tmp_path, monkeypatch):
    import gguf

    parses = []
    reader = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *args, **kwargs: parses.append(args) or reader(*args, **kwargs))
    shared = gguf.GGUFReader
    embedded.build_smollm2(tmp_path / "smollm2")
    assert len(parses) == 1  # transformers asks for it three times: tokenizer, config, weights
    assert gguf.GGUFReader is shared  # given back after the conversion
    with embedded.gguf_parsed_once():
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert not hasattr(gguf.get_tensor_name_map, "cache_info")
    assert sorted(path.name for path in (tmp_path / "smollm2").iterdir()) == [
        "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json",
    ]  # fmt: skip
