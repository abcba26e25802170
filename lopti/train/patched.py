"""A GRPOTrainer another library patched is refused: lopti's loss reaches the model only through TRL's own methods.

Some libraries (Unsloth among them) replace methods of TRL's GRPOTrainer, or the class itself, with their own code.
Where that code does not call `_compute_loss` as TRL's does, LoptiGRPOTrainer would train without AR and Lopti and
say nothing. So before training, each method of GRPOTrainer that lopti overrides or relies on must be defined in
TRL's or transformers' own source files.
"""

from __future__ import annotations

from pathlib import Path

import transformers
import trl

from lopti.errors import TrainingStopped

# the methods LoptiGRPOTrainer overrides or whose call order it relies on (tests/train/test_trl_contract.py)
RELIED_ON = (
    "compute_loss", "_compute_loss", "training_step", "_prepare_inputs", "_generate_and_score_completions",
    "_calculate_rewards", "_get_per_token_logps_and_entropies", "_generate_single_turn",
)  # fmt: skip
OWN_SOURCES = (Path(trl.__file__).parent, Path(transformers.__file__).parent)


def defined_in(method: object) -> Path | None:
    """Return the source file of a function (of a wrapper, not of what it wraps), None if it has none."""
    code = getattr(method, "__code__", None)
    return None if code is None else Path(code.co_filename)


def patched_methods(base: type) -> dict[str, str]:
    """Return {method: where it is defined} for each relied-on method of `base` not defined in TRL or transformers."""
    found = {}
    for name in RELIED_ON:
        source = defined_in(getattr(base, name))
        if source is None or not any(source.is_relative_to(own) for own in OWN_SOURCES):
            found[name] = str(source) if source else repr(getattr(base, name))
    return found


def refuse_patched(base: type) -> None:
    """Raise a one-line error naming each method of TRL's GRPOTrainer (`base`) that another library replaced."""
    patched = patched_methods(base)
    if patched:
        where = "; ".join(f"{name} is defined in {source}" for name, source in patched.items())
        raise TrainingStopped(
            f"TRL's GRPOTrainer is patched by another library ({where}): LoptiGRPOTrainer would train without "
            "applying AR or Lopti; run lopti in a process where GRPOTrainer is TRL's own"
        )
