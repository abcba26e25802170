"""Shared helpers for the verl integration tests: lopti's recipes composed on verl's own config."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "verl"


def compose_recipe(name: str, overrides: list[str] | None = None) -> DictConfig:
    """Return a recipe of configs/verl composed with verl's ppo_trainer.yaml, as verl's main_ppo does."""
    with initialize_config_dir(config_dir=str(RECIPES), version_base=None):
        return compose(config_name=name, overrides=overrides or [])


@pytest.fixture
def recipe():
    """Return `compose_recipe`, for tests that compose with overrides."""
    return compose_recipe


@pytest.fixture
def kk_config() -> DictConfig:
    return compose_recipe("kk-qwen2.5-3b")
