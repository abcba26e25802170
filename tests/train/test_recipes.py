"""Every shipped recipe parses, names only known keys and makes a valid LoptiGRPOConfig."""

from pathlib import Path

import pytest
import torch
import yaml
from test_trainer import make  # pytest puts each test folder on sys.path
from transformers import AutoModelForCausalLM

from lopti.commands.settings import resolve, split
from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

CONFIGS = Path(__file__).resolve().parents[2] / "lopti" / "configs"
RECIPES = sorted(CONFIGS.glob("*.yaml"))
# GPU-only switches, turned off so the recipe's other settings can be validated on this CPU machine.
CPU_OVERRIDES = {"bf16": False, "use_vllm": False, "use_cpu": True, "gradient_checkpointing": False}


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_recipe_is_valid(recipe, tmp_path):
    settings = resolve(recipe, {**CPU_OVERRIDES, "output_dir": str(tmp_path)})
    run, trainer_kwargs = split(settings)
    args = LoptiGRPOConfig(**trainer_kwargs)
    assert args.max_steps > 0 and run.model


def test_the_tiny_recipes_skip_recomputing_layers_which_changes_no_weight(peaked_model_dir, kk_prompts, tmp_path):
    # TRL turns gradient checkpointing on by default; the tiny model's recipes turn it off, which spares the
    # backward a second forward. Recomputing a layer gives the same floats, so training ends on the same weights.
    for name in ("kk-tiny-cpu.yaml", "kk-tiny-varied-cpu.yaml"):
        assert yaml.safe_load((CONFIGS / name).read_text())["gradient_checkpointing"] is False, name
    weights = {}
    for checkpointing in (True, False):
        trainer = make(
            LoptiGRPOTrainer, LoptiGRPOConfig, peaked_model_dir, kk_prompts, tmp_path / str(checkpointing),
            max_steps=4, lopti=True, num_iterations=2, learning_rate=1e-3, gradient_checkpointing=checkpointing,
        )  # fmt: skip
        trainer.train()
        assert trainer.model.is_activation_checkpointing is checkpointing  # the Trainer switches it on in train()
        weights[checkpointing] = [p.detach().clone() for p in trainer.model.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(weights[True], weights[False], strict=True))
    start = AutoModelForCausalLM.from_pretrained(peaked_model_dir).parameters()
    assert any(not torch.equal(p, q) for p, q in zip(weights[True], start, strict=True))


def test_paper_recipes_match_paper_section_7():
    for name in ("kk-qwen2.5-3b.yaml", "kk-qwen2.5-7b-1m.yaml"):
        recipe = yaml.safe_load((CONFIGS / name).read_text())
        processes = 4
        minibatch = recipe["per_device_train_batch_size"] * processes * recipe["gradient_accumulation_steps"]
        rl_batch = recipe["per_device_train_batch_size"] * processes * recipe["steps_per_generation"]
        assert (minibatch, rl_batch, rl_batch // recipe["num_generations"]) == (256, 512, 64)
        assert (recipe["temperature"], recipe["learning_rate"], recipe["beta"]) == (0.7, 1e-6, 0.001)
        assert (recipe["epsilon"], recipe["epsilon_high"], recipe["dual_clip"]) == (0.2, 0.24, 10.0)
        assert (recipe["ar_alpha"], recipe["lopti_eta"], recipe["max_completion_length"]) == (0.3, 0.5, 4096)


PAPER_RECIPES = ("kk-qwen2.5-3b.yaml", "kk-qwen2.5-7b-1m.yaml", "math-qwen2.5-7b.yaml")


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_vllm_recipes_decide_on_importance_sampling(recipe, tmp_path):
    # The paper has no vLLM-vs-trainer importance ratio; TRL's default (on) rescales or masks the policy
    # loss, so every vLLM recipe states its choice and the paper's recipes turn it off.
    recipe_settings = yaml.safe_load(recipe.read_text())
    if not recipe_settings.get("use_vllm"):
        assert recipe.name not in PAPER_RECIPES, "the paper's recipes sample with vLLM"
        return
    assert "vllm_importance_sampling_correction" in recipe_settings, "a vLLM recipe must choose"
    settings = resolve(recipe, {**CPU_OVERRIDES, "output_dir": str(tmp_path)})
    args = LoptiGRPOConfig(**split(settings)[1])
    assert args.vllm_importance_sampling_correction is (recipe.name not in PAPER_RECIPES)


def test_deepspeed_config_is_zero3():
    config = yaml.safe_load((CONFIGS / "accelerate" / "deepspeed_zero3.yaml").read_text())
    assert config["distributed_type"] == "DEEPSPEED" and config["deepspeed_config"]["zero_stage"] == 3
