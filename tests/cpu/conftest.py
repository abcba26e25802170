"""The CPU engine's tests train as the trainer tests do (tests/train): the same K&K prompts, tiny models of other
families and helpers (`test_trainer.make`, its tolerances), so that a number here means what it means there."""

import importlib.util
import sys
from pathlib import Path

TRAIN_TESTS = Path(__file__).resolve().parents[1] / "train"
sys.path.insert(0, str(TRAIN_TESTS))  # `from test_trainer import ...`, as tests/train's own files import it

_spec = importlib.util.spec_from_file_location("train_test_fixtures", TRAIN_TESTS / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
kk_prompts = _fixtures.kk_prompts
image_prompts = _fixtures.image_prompts
tiny_moe_model_dir = _fixtures.tiny_moe_model_dir
tiny_hybrid_model_dir = _fixtures.tiny_hybrid_model_dir
tiny_vision_model_dir = _fixtures.tiny_vision_model_dir
