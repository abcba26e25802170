"""A GRPOTrainer whose methods another library replaced (as Unsloth does) is refused before training, in one line
naming the method, and `lopti train` ends on that line instead of training without AR and Lopti."""

import functools

import pytest
from trl import GRPOTrainer

from lopti.cli import main
from lopti.errors import TrainingStopped
from lopti.train.config import LoptiGRPOConfig
from lopti.train.patched import RELIED_ON, patched_methods
from lopti.train.trainer import LoptiGRPOTrainer


def test_trls_own_grpo_trainer_is_unpatched():
    assert patched_methods(GRPOTrainer) == {}


def another_librarys_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    raise AssertionError("training must stop before any loss is computed")


@pytest.mark.parametrize("method", RELIED_ON)
def test_a_replaced_method_is_named(monkeypatch, method):
    monkeypatch.setattr(GRPOTrainer, method, another_librarys_loss)
    assert list(patched_methods(GRPOTrainer)) == [method]
    assert __file__ in patched_methods(GRPOTrainer)[method]


def test_a_wrapper_that_copies_trls_names_is_still_caught(monkeypatch):
    original = GRPOTrainer.compute_loss

    @functools.wraps(original)  # __module__, __qualname__ and __doc__ say TRL; the code is this file's
    def wrapped(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "compute_loss", wrapped)
    assert list(patched_methods(GRPOTrainer)) == ["compute_loss"]


def test_the_trainer_refuses_a_patched_compute_loss_before_loading_anything(monkeypatch, tmp_path):
    monkeypatch.setattr(GRPOTrainer, "compute_loss", another_librarys_loss)
    with pytest.raises(TrainingStopped, match=r"compute_loss is defined in .*test_patched.py\): LoptiGRPOTrainer "
                       "would train without applying AR or Lopti"):  # fmt: skip
        LoptiGRPOTrainer(model="no/such-model", args=LoptiGRPOConfig(str(tmp_path), ar_alpha=0.3, use_cpu=True))


def test_lopti_train_ends_on_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(GRPOTrainer, "compute_loss", another_librarys_loss)
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    argv = ["train", "--task", "kk", "--max_steps", "1", "--train_puzzles", "16", "--evaluate", "false",
            "--report_to", "none", "--output_dir", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "patched by another library (compute_loss is defined in" in err
    assert not any((tmp_path / "run").glob("checkpoint-*"))
