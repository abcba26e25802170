"""`CpuFastPath` on its own: mixed into TRL's plain GRPOTrainer, it gives GRPOTrainer's training to float rounding,
and it leaves out TRL's old-log-prob forward exactly where the first pass's forward gives the same numbers."""

import collections
import functools
import logging

import pytest
import torch
from test_trainer import FAST_PATH, make
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
from trl import GRPOConfig, GRPOTrainer

from lopti.cpu import CpuLoptiGRPOTrainer, decode, packing, trainer_class
from lopti.cpu.fast_path import CpuFastPath, generation_problem, model_problem, skips_old_forward
from lopti.train import LoptiGRPOConfig, LoptiGRPOTrainer


class FastGRPOTrainer(CpuFastPath, GRPOTrainer):
    """TRL's trainer with the fast path and nothing else of lopti's, its rollout drawing generate's very tokens."""

    draws_like_generate = True


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_fast_path_alone_trains_like_grpo_trainer(peaked_model_dir, kk_prompts, tmp_path, monkeypatch):
    packed = []
    original = packing.packed_log_probs
    monkeypatch.setattr(packing, "packed_log_probs", lambda *a, **k: packed.append(1) or original(*a, **k))
    settings = dict(max_steps=4, num_iterations=2, beta=0.04, learning_rate=1e-3, per_device_train_batch_size=8)
    plain = make(GRPOTrainer, GRPOConfig, peaked_model_dir, kk_prompts, tmp_path, **settings)
    plain.train()
    assert packed == []
    fast = make(FastGRPOTrainer, GRPOConfig, peaked_model_dir, kk_prompts, tmp_path, **settings)
    fast.train()
    # per generated batch (two): the reference's log-probs, then one forward per pass; no old-log-prob forward
    assert len(packed) == 6
    assert logged(fast, "num_tokens") == logged(plain, "num_tokens")
    assert logged(fast, "loss") == pytest.approx(logged(plain, "loss"), abs=FAST_PATH["loss"])
    assert logged(fast, "grad_norm") == pytest.approx(logged(plain, "grad_norm"), rel=FAST_PATH["grad_norm"])
    assert logged(fast, "kl") == pytest.approx(logged(plain, "kl"), abs=1e-6)
    for p, q in zip(plain.model.parameters(), fast.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=FAST_PATH["weights"], rtol=0)


def test_the_trainer_class_is_the_switch():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert trainer_class(cpu) is trainer_class(cpu, fast_path=True) is CpuLoptiGRPOTrainer
    assert trainer_class(cpu, fast_path=False) is trainer_class(gpu) is LoptiGRPOTrainer


def test_switched_off_it_runs_trl_code_only(tiny_model_dir, kk_prompts, tmp_path, monkeypatch):
    monkeypatch.setattr(packing, "packed_log_probs", lambda *a, **k: pytest.fail("packed forward ran"))
    monkeypatch.setattr(packing, "shared_prefill_generate", lambda *a, **k: pytest.fail("shared prefill ran"))
    switched_off = trainer_class(torch.device("cpu"), fast_path=False)  # `lopti train`'s cpu_fast_path: false
    trainer = make(switched_off, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=2, num_iterations=2)
    trainer.train()
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert any((p - s).abs().max() > 0 for p, s in zip(trainer.model.parameters(), start.parameters(), strict=True))


@pytest.mark.parametrize(
    "steps_per_generation, accumulation, num_iterations, skipped",
    [
        (1, 1, 2, True),  # two passes, each one optimizer step: the first sees the generating weights
        (1, 1, 1, False),  # one pass, one step: TRL runs no old forward to skip
        (2, 1, 1, False),  # a step between the micro-batches of the first pass
        (2, 2, 2, True),
        (4, 2, 1, False),
    ],
)
def test_old_forward_is_left_out_only_where_the_first_pass_gives_it(
    steps_per_generation, accumulation, num_iterations, skipped
):
    class Args:
        gradient_accumulation_steps = accumulation

    Args.steps_per_generation = steps_per_generation
    assert skips_old_forward(Args, num_iterations) is skipped


def rollout(trainer, prompts):
    """Return TRL's completions for 2 prompts × 4 generations from a fixed seed."""
    tokenizer = trainer.processing_class
    prompt_ids = [tokenizer(prompts[i]["prompt"])["input_ids"] for i in range(2) for _ in range(4)]
    torch.manual_seed(0)
    return trainer._generate_single_turn(prompt_ids, None, {}, 4)[0]


# Generation settings the fast rollout does not reproduce, each with the reason its debug note gives.
LEFT_TO_GENERATE = {
    "beam-search": (dict(generation_kwargs={"num_beams": 2}), "generation mode beam_sample (num_beams=2)"),
    "no-cache": (dict(generation_kwargs={"use_cache": False}), "use_cache=False"),
    "static-cache": (dict(cache_implementation="static"), "cache_implementation='static'"),
}


@pytest.mark.parametrize(("settings", "reason"), LEFT_TO_GENERATE.values(), ids=LEFT_TO_GENERATE.keys())
def test_generation_settings_it_does_not_reproduce_are_left_to_trl(tiny_model_dir, kk_prompts, tmp_path, monkeypatch,
                                                                   caplog, settings, reason):  # fmt: skip
    monkeypatch.setattr(packing, "shared_prefill_generate", lambda *a, **k: pytest.fail("the fast rollout ran"))
    completions = {}
    for fast in (False, True):
        trainer = make(FastGRPOTrainer if fast else GRPOTrainer, GRPOConfig, tiny_model_dir, kk_prompts, tmp_path,
                       max_steps=1, **settings)  # fmt: skip
        with caplog.at_level(logging.DEBUG, logger="lopti.cpu.fast_path"):
            completions[fast] = rollout(trainer, kk_prompts)
    assert completions[True] == completions[False]
    assert f"fast path leaves this to TRL's own code: {reason}" in caplog.text


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (dict(num_return_sequences=2, do_sample=True), "num_return_sequences=2"),
        (dict(prompt_lookup_num_tokens=2, do_sample=False), "generation mode assisted_generation"),
    ],
)
def test_other_generation_modes_are_named(settings, reason):
    assert reason in generation_problem(GenerationConfig(**settings))
    assert generation_problem(GenerationConfig(do_sample=True, top_k=5)) is None


def test_sliding_window_layers_are_named(tiny_model_dir):
    """A sliding window is not in the packed layout's mask: a model with one runs TRL's forwards."""
    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.update(dict(use_sliding_window=True, sliding_window=4, max_window_layers=0,
                       layer_types=["sliding_attention"] * config.num_hidden_layers))  # fmt: skip
    assert "DynamicSlidingWindowLayer" in model_problem(AutoModelForCausalLM.from_config(config))


def test_hybrid_model_runs_trl_code_only(tiny_hybrid_model_dir, tiny_model_dir, kk_prompts, tmp_path, monkeypatch,
                                         caplog):  # fmt: skip
    """A convolution layer's state is not restricted by the packed layout's mask: every forward is TRL's."""
    monkeypatch.setattr(packing, "packed_log_probs", lambda *a, **k: pytest.fail("packed forward ran"))
    monkeypatch.setattr(packing, "shared_prefill_generate", lambda *a, **k: pytest.fail("the fast rollout ran"))
    trainer = make(FastGRPOTrainer, GRPOConfig, tiny_hybrid_model_dir, kk_prompts, tmp_path, max_steps=1,
                   num_iterations=2)  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="lopti.cpu.fast_path"):
        trainer.train()
    assert "its cache has LinearAttentionLayer layers, not only full attention" in caplog.text
    assert model_problem(AutoModelForCausalLM.from_pretrained(tiny_model_dir)) is None


@pytest.mark.parametrize(
    ("family", "reason"),
    [
        ("tiny_vision_model_dir", "images in the prompts"),
        ("tiny_vision_model_dir", "model inputs beyond the tokens (num_images, pixel_values)"),
        ("tiny_moe_model_dir", "model inputs beyond the tokens (compute_aux_loss)"),
    ],
)
def test_models_with_inputs_beyond_the_tokens_run_trls_forwards(request, image_prompts, kk_prompts, tmp_path,
                                                                monkeypatch, caplog, family, reason):  # fmt: skip
    """Images and an MoE router loss are inputs the packed forward does not pass, and images ones the shared
    prefill does not: those forwards (and a vision model's rollout) are TRL's, each with a debug note. An MoE
    model's rollout needs no router loss and stays fast (tests/train/test_conformance.py compares it to TRL's)."""
    vision = family == "tiny_vision_model_dir"
    monkeypatch.setattr(packing, "packed_log_probs", lambda *a, **k: pytest.fail("packed forward ran"))
    if vision:
        monkeypatch.setattr(packing, "shared_prefill_generate", lambda *a, **k: pytest.fail("the fast rollout ran"))
    prompts = image_prompts if vision else kk_prompts
    trainer = make(FastGRPOTrainer, GRPOConfig, request.getfixturevalue(family), prompts, tmp_path, max_steps=1)
    with caplog.at_level(logging.DEBUG, logger="lopti.cpu.fast_path"):
        trainer.train()
    assert f"fast path leaves this to TRL's own code: {reason}" in caplog.text


def test_the_rollout_draws_by_inverse_cdf_unless_told_to_draw_generates_tokens(
    tiny_model_dir, kk_prompts, tmp_path, monkeypatch
):
    draws = collections.Counter()

    def counted(name, draw, *args):
        draws[name] += 1
        return draw(*args)

    for name in ("draw_like_multinomial", "draw_by_inverse_cdf"):
        monkeypatch.setattr(decode, name, functools.partial(counted, name, getattr(decode, name)))
    make(CpuLoptiGRPOTrainer, LoptiGRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1).train()
    assert set(draws) == {"draw_by_inverse_cdf"}
    draws.clear()
    make(FastGRPOTrainer, GRPOConfig, tiny_model_dir, kk_prompts, tmp_path, max_steps=1).train()
    assert set(draws) == {"draw_like_multinomial"}
