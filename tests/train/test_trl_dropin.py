"""LoptiGRPOTrainer where GRPOTrainer's inputs go beyond a plain text model: MoE router losses, vision inputs,
async rewards, the optional arguments, and TRL's metric names. With lopti's features off each must give what
GRPOTrainer gives."""

import dataclasses

import pytest
import torch
from test_trainer import COMMON, EXACT, id_reward, load, logged, make
from test_trl_options import assert_trains_like_grpo, train_both
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from lopti.train.config import LoptiGRPOConfig
from lopti.train.trainer import LoptiGRPOTrainer


@pytest.mark.parametrize(
    "model_fixture", ["tiny_moe_model_dir", "tiny_gpt_oss_model_dir"], ids=["qwen3-moe", "gpt-oss"]
)
def test_moe_loss_adds_the_router_loss_as_trl_does(request, kk_prompts, tmp_path, model_fixture):
    """TRL's forwards (LoptiGRPOTrainer): the loss, its metrics and the weights are GRPOTrainer's to float rounding.
    Accumulation divides the router loss; the entropy bonus makes TRL log policy_loss and entropy_coef. GPT-OSS
    (its experts' biases, attention sinks, a sliding-window layer) runs on the CPU in float32 with eager attention,
    as TRL's forwards run it there."""
    folder = request.getfixturevalue(model_fixture)
    settings = dict(max_steps=2, loss_type="grpo", gradient_accumulation_steps=2, entropy_coef=0.01)
    plain = make(GRPOTrainer, GRPOConfig, folder, kk_prompts, tmp_path, **settings)
    plain.train()
    ours = make(LoptiGRPOTrainer, LoptiGRPOConfig, folder, kk_prompts, tmp_path, **settings)
    ours.train()
    assert ours.aux_loss_enabled and ours.router_aux_loss_coef == 0.5
    tolerance = EXACT
    assert logged(ours, "num_tokens") == logged(plain, "num_tokens")
    aux = logged(plain, "aux_loss")
    assert len(aux) == 2 and min(aux) > 1.0  # 0.5 × aux is most of the loss: without it the losses differ by ~1
    for key in ("loss", "aux_loss", "policy_loss", "entropy_coef", "entropy"):
        assert logged(ours, key) == pytest.approx(logged(plain, key), abs=tolerance["loss"]), key
    assert logged(ours, "grad_norm") == pytest.approx(logged(plain, "grad_norm"), rel=tolerance["grad_norm"])
    for p, q in zip(plain.model.parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=tolerance["weights"], rtol=0)


def test_vision_inputs_reach_the_loss_forward_as_trl_passes_them(tiny_model_dir, kk_prompts, tmp_path, monkeypatch):
    """Every vision field TRL's loss reads, beyond the ones a tiny LLaVA gives (tests/train/test_conformance.py
    trains one end to end): given one batch carrying them all, lopti's `_compute_loss` calls TRL's log-prob forward
    with the same arguments as TRL's `_compute_loss` (a recording stands in for the forward)."""
    trainer = make(LoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1)
    calls = []

    def recorded_forward(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        calls.append(kwargs)
        logps = torch.full((len(input_ids), logits_to_keep), -1.0, requires_grad=True)
        return logps, torch.ones(len(input_ids), logits_to_keep), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", recorded_forward)
    vision = dict(
        pixel_values=torch.randn(6, 12), image_grid_thw=torch.tensor([[1, 2, 3]]), num_images=[1, 0],
        pixel_attention_mask=torch.ones(2, 4, dtype=torch.long), spatial_shapes=torch.tensor([[2, 2]]),
        num_tiles=[1, 0], image_sizes=torch.tensor([[4, 4]]), token_type_ids=torch.zeros(2, 5, dtype=torch.long),
        mm_token_type_ids=torch.ones(2, 5, dtype=torch.long), image_position_ids=torch.tensor([[0, 1]]),
    )  # fmt: skip
    batch = dict(
        prompt_ids=torch.tensor([[5, 6], [7, 8]]), prompt_mask=torch.ones(2, 2, dtype=torch.long),
        completion_ids=torch.tensor([[9, 10, 11], [12, 13, 14]]), completion_mask=torch.ones(2, 3, dtype=torch.long),
        advantages=torch.tensor([1.0, -1.0]), num_items_in_batch=torch.tensor(6.0), **vision,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    GRPOTrainer._compute_loss(trainer, trainer.model, batch)
    trainer._compute_loss(trainer.model, batch)
    trl_call, lopti_call = calls
    assert set(vision) <= set(trl_call)
    assert lopti_call.keys() == trl_call.keys()
    for name, value in trl_call.items():
        assert lopti_call[name] is value, name  # the batch's own object, as TRL passes it


def image_newline_change(trainer, folder) -> float:
    """Return how far training moved a LLaVA-NeXT's `image_newline`, which only the image features use."""
    start = load(folder)[0]
    return (trainer.model.model.image_newline - start.model.image_newline).abs().max().item()


def test_llava_next_trains_its_image_inputs_as_grpo_does(tiny_llava_next_model_dir, image_prompts, tmp_path):
    """The loss forward gets the tiles (`pixel_values`) and `image_sizes`: without the pixels `image_newline` would
    get no gradient, without the sizes the model could not unpad the tile features. Features off: GRPOTrainer's
    weights; AR and Lopti on (η = 1/V puts tokens in each phase): `image_newline` trains too."""
    folder = tiny_llava_next_model_dir
    plain, ours = train_both(folder, image_prompts, tmp_path, dict(loss_type="grpo"), cpu_fast_path=False)
    assert_trains_like_grpo(plain, ours, EXACT)
    assert image_newline_change(plain, folder) > 1e-3
    vocabulary = load(folder)[0].get_output_embeddings().weight.size(0)
    lopti = make(LoptiGRPOTrainer, LoptiGRPOConfig, folder, image_prompts, tmp_path, max_steps=2, ar_alpha=0.3,
                 lopti=True, num_iterations=2, lopti_eta=1.0 / vocabulary)  # fmt: skip
    lopti.train()
    assert [len(logged(lopti, f"lopti/phase{k}_loss")) for k in (1, 2)] == [1, 1]
    assert image_newline_change(lopti, folder) > 1e-3


async def async_id_reward(completions, completion_ids, **kwargs):
    """`id_reward` as a coroutine function (an LLM judge's shape)."""
    return id_reward(completions, completion_ids)


class AsyncIdReward:
    """`id_reward` as an instance whose `__call__` is async: TRL names it after its class."""

    async def __call__(self, completions, completion_ids, **kwargs):
        return id_reward(completions, completion_ids)


def test_async_rewards_are_awaited_and_their_values_used(tiny_model_dir, kk_prompts, tmp_path):
    args = LoptiGRPOConfig(output_dir=str(tmp_path / "async"), **{**COMMON, "max_steps": 1})
    trainer = LoptiGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), args=args, train_dataset=kk_prompts,
        reward_funcs=[id_reward, async_id_reward, AsyncIdReward()],
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )  # fmt: skip
    assert trainer.reward_func_names == ["id_reward", "async_id_reward", "AsyncIdReward"]
    trainer.train()
    plain = logged(trainer, "rewards/id_reward/mean")
    assert len(plain) == 1 and 0.0 < plain[0] < 1.0
    assert logged(trainer, "rewards/async_id_reward/mean") == plain
    assert logged(trainer, "rewards/AsyncIdReward/mean") == plain
    assert logged(trainer, "reward") == pytest.approx([3 * plain[0]])


@pytest.fixture
def bf16_accepted(monkeypatch):
    """TRL's default config asks for bf16, which transformers refuses on a machine without a GPU; accept it, as
    a GPU machine would (the tests only build trainers)."""
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)


def test_without_args_the_config_is_trls_default_with_lopti_off(tiny_model_dir, kk_prompts, tmp_path, monkeypatch,
                                                                 bf16_accepted):  # fmt: skip
    monkeypatch.chdir(tmp_path)  # the default output_dir is relative, as TRL's
    plain = GRPOTrainer(str(tiny_model_dir), id_reward, train_dataset=kk_prompts)
    ours = LoptiGRPOTrainer(str(tiny_model_dir), id_reward, train_dataset=kk_prompts)
    assert isinstance(ours.args, LoptiGRPOConfig)
    name = tiny_model_dir.name
    assert (plain.args.output_dir, ours.args.output_dir) == (f"{name}-GRPO", f"{name}-LoptiGRPO")
    fields = [f.name for f in dataclasses.fields(GRPOConfig)]
    different = {f for f in fields if getattr(ours.args, f) != getattr(plain.args, f)}
    assert different == {"output_dir", "use_bias_correction_kl"}  # lopti's documented default: the paper's KL
    assert not ours.args.lopti and ours.args.ar_alpha == 0.0 and ours.args.advantage_estimator is None


def test_reward_funcs_may_be_left_out_where_trl_allows(tiny_model_dir, kk_prompts, tmp_path, monkeypatch,
                                                       bf16_accepted):  # fmt: skip
    """Left out, they reach TRL as its own default: TRL then takes the rewards of an `environment_factory`
    (tests/train/test_environments.py), or says that there is no reward source, as here."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="No reward source provided"):
        LoptiGRPOTrainer(str(tiny_model_dir), train_dataset=kk_prompts)
