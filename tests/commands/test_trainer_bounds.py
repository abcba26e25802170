"""`LoptiGRPOConfig.TRL_BOUNDS` holds only bounds of TRL's and transformers' fields that those libraries leave
unchecked: each value past one of them builds TRL's `GRPOConfig` without an error, so lopti refuses it itself. When
this fails, the library checks that bound now: drop it from the table, and the library's ValueError is the one line a
user sees."""

import pytest
from trl import GRPOConfig

from lopti.train.config import LoptiGRPOConfig

TRAINER_BOUNDS = LoptiGRPOConfig.TRL_BOUNDS

CHECKED_BY_LOPTI_FIRST = {"num_generations"}  # TRL checks it, after LoptiGRPOConfig's own message divides by it


def below(bounds: dict) -> int:
    """Return a value 1 below the lower bound of `bounds` ("low" or "above")."""
    return bounds["low"] - 1 if "low" in bounds else bounds["above"] - 1


@pytest.mark.parametrize("key", sorted(set(TRAINER_BOUNDS) - CHECKED_BY_LOPTI_FIRST))
def test_the_libraries_take_each_value_lopti_refuses(key, tmp_path):
    value = below(TRAINER_BOUNDS[key])
    GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **{key: value})
    with pytest.raises(ValueError, match=f"^{key} must be"):
        LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **{key: value})


def test_a_bound_transformers_checks_is_left_to_it(tmp_path):
    assert "warmup_steps" not in TRAINER_BOUNDS
    with pytest.raises(ValueError, match="warmup_steps >= 0"):
        LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], warmup_steps=-1)
