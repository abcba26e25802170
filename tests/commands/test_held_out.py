"""The evaluation before training is made once per model, held-out set and settings, then reused."""

import json

import pytest

from lopti.commands.held_out import evaluation_key, remembered
from lopti.models import embedded


@pytest.fixture
def model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    embedded.write_manifest(folder)
    return folder


ROWS = [{"prompt": "p1", "solution": [True]}, {"prompt": "p2", "solution": [False]}]
SETTINGS = {"max_new_tokens": 300, "samples": 4}


def test_computed_once_then_reused_and_recomputed_when_the_file_is_cut(tmp_path, monkeypatch, model_folder):
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    calls = []

    def compute():
        calls.append(1)
        return {"overall": {"accuracy": 0.25}}, {"overall": {"accuracy": 0.5}}

    key = evaluation_key(model_folder, ROWS, SETTINGS)
    assert remembered(key, compute) == (compute(), False)
    assert remembered(key, compute) == (compute(), True) and len(calls) == 3  # the second call used the file
    (path,) = (tmp_path / "cache" / "evaluations").iterdir()
    path.write_text(json.dumps([{"overall": {}}])[:7])  # a kill mid-write can leave no more than this
    assert remembered(key, compute) == (compute(), False)
    assert remembered(None, compute)[1] is False  # no key: always computed


def test_the_key_changes_with_the_weights_the_rows_the_settings_and_the_threads(model_folder, monkeypatch):
    import torch

    key = evaluation_key(model_folder, ROWS, SETTINGS)
    assert evaluation_key(model_folder, ROWS[:1], SETTINGS) != key
    assert evaluation_key(model_folder, ROWS, {**SETTINGS, "samples": 2}) != key
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    assert evaluation_key(model_folder, ROWS, SETTINGS) != key
    monkeypatch.undo()
    (model_folder / "model.safetensors").write_bytes(b"other weights")
    embedded.write_manifest(model_folder)
    assert evaluation_key(model_folder, ROWS, SETTINGS) != key


def test_a_folder_without_a_manifest_has_no_key(tmp_path):
    assert evaluation_key(tmp_path, ROWS, SETTINGS) is None
