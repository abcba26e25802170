"""configs/verl: the paper's recipes compose with verl's config, pass its checks, and reach lopti's rewards."""

import datasets
import pytest
from hydra import compose, initialize_config_module
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from lopti.integrations.verl.ar import ARPolicyLossConfig
from lopti.integrations.verl.trainer import LoptiPPOTrainer
from lopti.tasks.kk.data import write_kk
from lopti.tasks.math.data import write_math


@pytest.mark.parametrize(("name", "alpha", "mode"), [("kk-qwen2.5-3b", 0.3, "lopti"), ("math-qwen2.5-7b", 0.1, "sync")])
def test_recipe_holds_the_papers_hyperparameters_and_passes_verls_checks(recipe, name, alpha, mode):
    config = recipe(name)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert (config.data.train_batch_size, rollout.n, actor.ppo_mini_batch_size * rollout.n) == (64, 8, 256)
    assert (rollout.temperature, rollout.top_p, actor.optim.lr, actor.optim.weight_decay) == (0.7, 1.0, 1e-6, 0.01)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.24, 10.0)
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef, actor.entropy_coeff) == (
        True,
        "low_var_kl",
        0.001,
        0,
    )
    assert (actor.loss_agg_mode, config.algorithm.adv_estimator, config.trainer.n_gpus_per_node) == (
        "token-mean",
        "grpo",
        4,
    )
    assert config.trainer.v1.trainer_mode == mode and config.trainer.v1.lopti.eta == 0.5

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    built = omega_conf_to_dataclass(config.actor_rollout_ref.actor)  # as verl's actor workers build it
    assert isinstance(built.policy_loss, ARPolicyLossConfig) and built.policy_loss.ar_alpha == alpha


def test_kk_recipe_builds_the_lopti_trainer(kk_config):
    assert isinstance(LoptiPPOTrainer(kk_config), LoptiPPOTrainer)


def test_kk_reward_is_verls_custom_reward_on_lopti_data(recipe, tmp_path):
    write_kk(tmp_path, people="3", train=2, test=1, seed=0, template="chat")  # `lopti data kk --template chat`
    row = datasets.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"))["train"][0]  # as verl reads it
    score = get_custom_reward_fn(recipe("kk-qwen2.5-3b"))
    truth = row["reward_model"]["ground_truth"]
    right = f"<think>reasoning</think><answer>{truth['solution_text_format']}</answer>"
    wrong = right.replace("knight", "KNAVE").replace("knave", "knight").replace("KNAVE", "knave")
    kwargs = {"data_source": row["data_source"], "ground_truth": truth, "extra_info": row["extra_info"]}
    assert score(solution_str=right, **kwargs) == 3.0
    assert score(solution_str=wrong, **kwargs) == -0.5  # format +1, wrong answer −1.5


def test_math_reward_is_verls_custom_reward_on_lopti_data(recipe, tmp_path):
    write_math(tmp_path, levels="1", train=1, test=1, seed=0)  # `lopti data math`
    row = datasets.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"))["train"][0]
    score = get_custom_reward_fn(recipe("math-qwen2.5-7b"))
    truth = row["reward_model"]["ground_truth"]
    kwargs = {"data_source": row["data_source"], "ground_truth": truth, "extra_info": row["extra_info"]}
    assert score(solution_str=f"so the answer is \\boxed{{{truth}}}", **kwargs) == 1.0
    assert score(solution_str="so the answer is \\boxed{x^{17}}", **kwargs) == 0.0


def test_the_documented_overrides_switch_ar_and_lopti_on_verls_own_config():
    overrides = [  # docs/guides/verl.md, "Switching AR and Lopti on"
        "actor_rollout_ref.actor.policy_loss._target_=lopti.integrations.verl.ar.ARPolicyLossConfig",
        "actor_rollout_ref.actor.policy_loss.loss_mode=lopti_ar",
        "+actor_rollout_ref.actor.policy_loss.ar_alpha=0.3",
        "actor_rollout_ref.actor.clip_ratio_c=10.0",
        "trainer.v1.trainer_mode=lopti",
        "+trainer.v1.lopti.eta=0.4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=8",
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose("ppo_trainer", overrides=overrides)
    built = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert isinstance(built.policy_loss, ARPolicyLossConfig) and built.policy_loss.ar_alpha == 0.3
    assert LoptiPPOTrainer(config).lopti.eta == 0.4
