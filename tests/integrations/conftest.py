"""Shared helpers for the verl integration tests: lopti's recipes composed on verl's own config.

They run in noxfile.py's `verl` session, where lopti[verl] is installed beside verl[cpu]==0.9.1 as verl pins it;
where verl is not installed they are not collected, and the main suite stays importable.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("verl") is None:
    collect_ignore_glob = ["test_verl_*.py"]
else:
    from hydra import compose, initialize_config_dir
    from omegaconf import DictConfig

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "verl"


def compose_recipe(name: str, overrides: list[str] | None = None) -> DictConfig:
    """Return a recipe of configs/verl composed with verl's ppo_trainer.yaml, as verl's main_ppo does."""
    with initialize_config_dir(config_dir=str(RECIPES), version_base=None):
        return compose(config_name=name, overrides=overrides or [])


@pytest.fixture(scope="session")
def recipe():
    """Return `compose_recipe`, for tests that compose with overrides."""
    return compose_recipe


@pytest.fixture
def kk_config() -> DictConfig:
    return compose_recipe("kk-qwen2.5-3b")
