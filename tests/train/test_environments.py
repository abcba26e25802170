"""LoptiGRPOTrainer with TRL's `environment_factory` and no `reward_funcs`: the environments own the data (`reset`
returns each rollout's prompt), expose a tool, and score each rollout (`get_reward`).

What TRL needs for it: a chat template that renders a whole tool-calling conversation, and one whose tool-call
markup TRL can parse (it knows the templates of the model families it supports); the tiny tokenizer's ChatML
template renders no tool calls, so TRL refuses it, and the tests give it TRL's Qwen3 template. A random tiny model
never writes Qwen3's `<tool_call>` markup, so no rollout calls the tool and TRL's tool loop (tool results masked out
of the loss) is not run here; `tests/train/test_trl_options.py` trains responses without loss tokens, and the loss
masks tool tokens with TRL's `tool_mask` (`_loss_mask` in lopti/train/trainer.py).
"""

import itertools
from collections.abc import Callable

import pytest
from test_conformance import largest_change
from test_trainer import COMMON, EXACT, load, logged
from test_trl_options import assert_trains_like_grpo
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen3_chat_template

from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer

pytestmark = pytest.mark.filterwarnings("ignore:You are using 'environment_factory':UserWarning")


class Knights:
    """A K&K-flavoured environment: its prompt names the knight it holds, and it scores a rollout by that knight
    (rewards that differ within a group of rollouts, so the advantages are not all zero)."""

    def __init__(self, serial: int, rewards: list[float]) -> None:
        self.serial, self.rewards, self.accused = serial, rewards, []

    def reset(self, **kwargs) -> str:
        self.accused = []
        return f"Knight {self.serial} says: I am a knight."

    def accuse(self, name: str) -> str:
        """Accuse a person of lying.

        Args:
            name: The person accused.
        """
        self.accused.append(name)
        return f"{name} is accused."

    def get_reward(self) -> float:
        return self.rewards[self.serial % len(self.rewards)]


def knights(rewards: list[float]) -> Callable[[], Knights]:
    """Return a factory of `Knights` numbered from 0: each trainer's first rollouts get the same knights."""
    serials = itertools.count()
    return lambda: Knights(next(serials), rewards)


def make(trainer_cls, config_cls, folder, tmp_path, rewards=(0.0, 1.0, 1 / 3, 2 / 3), chat_template=qwen3_chat_template,
         **overrides):  # fmt: skip
    """Build `trainer_cls` on the tiny model with `Knights` environments and neither a dataset nor reward funcs."""
    args = config_cls(output_dir=str(tmp_path / trainer_cls.__name__), **{**COMMON, "max_steps": 2, **overrides})
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = chat_template
    return trainer_cls(model=AutoModelForCausalLM.from_pretrained(folder), args=args, processing_class=tokenizer,
                       environment_factory=knights(list(rewards)))  # fmt: skip


def test_environment_rewards_train_like_grpo(tiny_model_dir, tmp_path):
    plain = make(GRPOTrainer, GRPOConfig, tiny_model_dir, tmp_path)
    plain.train()
    ours = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, tmp_path)
    ours.train()
    assert ours.reward_func_names == ["Knights"]
    assert logged(ours, "rewards/Knights/std")[0] > 0.0, "the knights' rewards differ within the group"
    assert_trains_like_grpo(plain, ours, EXACT)
    assert largest_change(plain, tiny_model_dir) > 1e-3, "the comparison needs parameter updates"


def test_environment_rewards_train_with_ar_and_lopti(tiny_model_dir, tmp_path):
    vocabulary = load(tiny_model_dir)[0].get_output_embeddings().weight.size(0)
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, tmp_path, ar_alpha=0.3, lopti=True,
                   num_iterations=2, lopti_eta=1.0 / vocabulary)  # fmt: skip
    trainer.train()
    assert [len(logged(trainer, f"lopti/phase{k}_loss")) for k in (1, 2)] == [1, 1]
    assert all(norm > 0.0 for norm in logged(trainer, "grad_norm")), "each phase's step has a gradient"
    assert logged(trainer, "ar/weight_mean")[0] < 1.0
    assert largest_change(trainer, tiny_model_dir) > 1e-3


def test_a_template_without_tool_calls_is_refused_by_trl(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="does not support tool calling"):
        make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, tmp_path, chat_template=tokenizer.chat_template)


def test_non_finite_environment_rewards_are_guarded_as_reward_funcs_are(tiny_model_dir, tmp_path, caplog):
    """The reward TRL makes of `get_reward` goes through lopti's reward guard, under TRL's name for it: a nan counts
    in `lopti/nonfinite_rewards` and the step on its batch is skipped, so the weights stay the model's (TRL alone
    would read the nan as "no reward" and train on the other three knights' rewards)."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, tmp_path, rewards=(0.0, 1.0, float("nan"), 0.5),
                   max_steps=1)  # fmt: skip
    trainer.train()
    assert logged(trainer, "lopti/nonfinite_rewards") == [1]
    assert "reward function 'Knights' returned nan for sample 2" in caplog.text
    assert largest_change(trainer, tiny_model_dir) == 0.0
