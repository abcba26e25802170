"""Guard for the TRL internals that LoptiGRPOTrainer overrides or relies on.

If this fails after a TRL upgrade, read the changed methods, update lopti/train/trainer.py and
lopti/train/fast_path.py where needed, rerun tests/train, then record the new fingerprints and widen the trl
pin in pyproject.toml.
"""

import hashlib
import inspect

import pytest
import trl
from trl import GRPOTrainer

from lopti.train.trainer import EXTRA_FORWARD_INPUTS

TESTED_TRL = "1.16.0"
FINGERPRINTS = {
    # overridden by LoptiGRPOTrainer (it calls super() and post-processes or replaces the result)
    "_compute_loss": "80295546bbdbf6f7",
    "_calculate_rewards": "736ae29b083840b5",
    "_generate_and_score_completions": "1fa48922792dcd5c",
    # relied on: the micro-step counter `_step`, the buffer reuse order (`_prepare_inputs`, whose micro-batch the
    # fast path keeps), and the log-prob helper (wrapped by the trainer and the fast path)
    "_prepare_inputs": "f824e7fb07147956",
    "training_step": "9e18632f7dd8e8d8",
    "_get_per_token_logps_and_entropies": "ea73c3909275851d",
    # wrapped by the CPU fast path (lopti/train/fast_path.py): it must reach the model via `unwrapped_model.generate`
    "_generate_single_turn": "e0f02e4fc094cefd",
}


@pytest.mark.parametrize("method", sorted(FINGERPRINTS))
def test_trl_internals_unchanged(method):
    source = inspect.getsource(getattr(GRPOTrainer, method))
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert digest == FINGERPRINTS[method], (
        f"GRPOTrainer.{method} changed (trl {trl.__version__}, lopti was checked against {TESTED_TRL}); "
        "re-check lopti/train/trainer.py before trusting AR/Lopti with this TRL version"
    )


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
