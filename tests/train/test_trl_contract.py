"""Guard for the TRL internals that LoptiGRPOTrainer and the CPU fast path override or rely on.

If this fails after a TRL upgrade, read the changed methods, update lopti/train/trainer.py and
lopti/cpu/fast_path.py where needed, rerun tests/train, then record the new fingerprints and widen the trl
pin in pyproject.toml.
"""

import hashlib
import inspect

import pytest
import trl
from transformers import Trainer
from trl import GRPOTrainer

from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.cpu.fast_path import CpuFastPath
from lopti.train.patched import RELIED_ON
from lopti.train.step_metrics import StepMetrics
from lopti.train.trainer import EXTRA_FORWARD_INPUTS, LoptiGRPOTrainer

TESTED_TRL = "1.16.0"
FINGERPRINTS = {
    # overridden by LoptiGRPOTrainer (it calls super() and post-processes or replaces the result), and the first four
    # also by CpuFastPath: `_compute_loss` (lopti's loss; the fast path keeps the first pass's log-probs),
    # `_generate_and_score_completions` (lopti's advantages; the fast path leaves out the old-log-prob forward),
    # `_get_per_token_logps_and_entropies` (lopti observes it; the fast path packs it), `_calculate_rewards`
    "_compute_loss": "80295546bbdbf6f7",
    # relied on: TRL's `compute_loss` is what the Trainer calls, and it reaches lopti's loss only through
    # `_compute_loss`; a replaced one (Unsloth's) is refused by lopti/train/patched.py
    "compute_loss": "a2d6ef8bd29c3e26",
    "_calculate_rewards": "736ae29b083840b5",
    "_generate_and_score_completions": "1fa48922792dcd5c",
    "_get_per_token_logps_and_entropies": "ea73c3909275851d",
    # overridden by LoptiGRPOTrainer to observe each micro-step; relied on for the micro-step counter `_step`
    "training_step": "9e18632f7dd8e8d8",
    # relied on: the buffer reuse order (the micro-batch dict `_compute_loss` gets is the one the later passes reuse)
    "_prepare_inputs": "f824e7fb07147956",
    # overridden by CpuFastPath (lopti/cpu/fast_path.py): it must reach the model via `unwrapped_model.generate`
    "_generate_single_turn": "e0f02e4fc094cefd",
}
# overridden by LoptiGRPOTrainer: transformers' resume warning, given the load result's missing keys
TRANSFORMERS_FINGERPRINTS = {"_issue_warnings_after_load": "7ccdd73aac16aecb"}
# every method of TRL's trainer that each class overrides: the docstrings of lopti/train/trainer.py and
# lopti/cpu/fast_path.py and docs/guides/trl.md list these, and each is fingerprinted above
OVERRIDES = {
    LoptiGRPOTrainer: {"__init__", "_calculate_rewards", "_compute_loss", "_generate_and_score_completions",
                       "_get_per_token_logps_and_entropies", "training_step", "_issue_warnings_after_load"},
    StepMetrics: set(),
    CpuFastPath: {"_compute_loss", "_generate_and_score_completions", "_generate_single_turn",
                  "_get_per_token_logps_and_entropies"},
    CpuLoptiGRPOTrainer: set(),
}  # fmt: skip


@pytest.mark.parametrize("cls", OVERRIDES, ids=lambda cls: cls.__name__)
def test_each_override_of_trls_trainer_is_listed_and_fingerprinted(cls):
    overridden = {name for name, value in vars(cls).items() if callable(value) and hasattr(GRPOTrainer, name)}
    assert overridden == OVERRIDES[cls]
    assert overridden - {"__init__"} <= FINGERPRINTS.keys() | TRANSFORMERS_FINGERPRINTS.keys()


def test_the_trainer_a_gpu_user_runs_holds_no_cpu_fast_path():
    assert CpuFastPath not in LoptiGRPOTrainer.__mro__
    assert CpuLoptiGRPOTrainer.__mro__[1:3] == (CpuFastPath, LoptiGRPOTrainer)


@pytest.mark.parametrize("method", sorted(TRANSFORMERS_FINGERPRINTS))
def test_transformers_internals_unchanged(method):
    source = inspect.getsource(getattr(Trainer, method))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == TRANSFORMERS_FINGERPRINTS[method], (
        f"Trainer.{method} changed: re-check LoptiGRPOTrainer.{method}"
    )


@pytest.mark.parametrize("method", sorted(FINGERPRINTS))
def test_trl_internals_unchanged(method):
    source = inspect.getsource(getattr(GRPOTrainer, method))
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert digest == FINGERPRINTS[method], (
        f"GRPOTrainer.{method} changed (trl {trl.__version__}, lopti was checked against {TESTED_TRL}); "
        "re-check lopti/train/trainer.py before trusting AR/Lopti with this TRL version"
    )


def test_every_method_the_patch_check_covers_is_fingerprinted():
    assert set(RELIED_ON) <= FINGERPRINTS.keys()


def test_signatures_lopti_calls():
    params = inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
    assert list(params)[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    assert "compute_entropy" in params
    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]


def test_loss_forward_passes_every_model_input_trl_accepts():
    """`_compute_loss` passes TRL's log-prob forward each extra model input (images, token types) by name."""
    params = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    handled = ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
               "compute_aux_loss"]  # fmt: skip
    assert sorted(EXTRA_FORWARD_INPUTS) == sorted(set(params) - set(handled))


def test_the_colocated_vllm_model_is_the_one_trl_syncs_weights_into():
    """lopti.train.engines checks the module TRL's `sync_weights` loads the trained weights into."""
    from trl.generation.vllm_generation import VLLMGeneration

    assert "llm.llm_engine.model_executor.driver_worker.model_runner.model" in inspect.getsource(VLLMGeneration)
