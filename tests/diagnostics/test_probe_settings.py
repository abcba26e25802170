"""The probe's settings: bad values named, a recipe's or run's AdamW and method settings under the trainer's keys,
dual clip off by default (it cannot bind in one update), and saved rollouts under both header keys."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lopti.diagnostics import probe
from lopti.diagnostics.analyze import AnalyzeConfig, analyze
from lopti.diagnostics.probe import ProbeConfig
from lopti.diagnostics.rollouts import Rollouts, load_rollouts, save_rollouts


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="bucket edges must rise strictly"):
        ProbeConfig(edges=(0, 0.7, 0.3, 1)).check()
    with pytest.raises(ValueError, match="optimizers: unknown adam; choose from sgd, adamw, adamw_warm"):
        ProbeConfig(optimizers="sgd,adam").check()
    with pytest.raises(ValueError, match=r"methods: method 'ar\+ppo': unknown part 'ppo'; a method is one of grpo"):
        ProbeConfig(methods="grpo,ar+ppo").check()
    with pytest.raises(ValueError, match=r"methods: method 'clip_cov\+kl_cov': .* choose one"):
        ProbeConfig(methods=("clip_cov+kl_cov",)).check()
    with pytest.raises(ValueError, match=r"methods: ar\+stapo listed twice"):
        ProbeConfig(methods="ar+stapo,AR+STAPO").check()
    for control in ("grpo2", "ar+lopti_random"):  # Lopti's controls act over training, not in one update
        with pytest.raises(ValueError, match=rf"methods: {re.escape(control)} is a training control of"):
            ProbeConfig(methods=f"grpo,{control}").check()
    with pytest.raises(ValueError, match="adamw_warm needs warmup_updates ≥ 1, got 0"):
        ProbeConfig(optimizers=("adamw_warm",), warmup_updates=0).check()
    with pytest.raises(ValueError, match=r"ar_alpha must be in \[0, 1\] and lopti_eta in \(0, 1\), got 1\.5, 0\.5"):
        ProbeConfig(ar_alpha=1.5).check()
    with pytest.raises(ValueError, match=r"dual_clip > 1 or null, got 0\.2, 0\.24 and 0\.5"):
        ProbeConfig(dual_clip=0.5).check()
    # the probe alone does not know the rollouts' task, so it has no α of its own for AR
    with pytest.raises(ValueError, match=r"methods: ar, ar\+lopti need ar_alpha above 0 \(lopti analyze takes"):
        ProbeConfig(ar_alpha=0.0).check()
    ProbeConfig(methods="grpo,lopti").check()


def test_adamw_settings_come_from_the_recipe():
    # `lopti analyze --config RECIPE` takes the AdamW regimes' settings from the recipe (`ProbeConfig.RUN_KEYS`);
    # the defaults are the embedded recipe's, so that the two cannot drift apart
    from lopti.commands.settings import RECIPES, from_run_config

    adamw = ("adam_lr", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm")
    tiny = AnalyzeConfig(**from_run_config(RECIPES / "kk-tiny-cpu.yaml", AnalyzeConfig))
    assert {key: getattr(tiny, key) for key in adamw} == {key: getattr(ProbeConfig(), key) for key in adamw}
    smollm2 = AnalyzeConfig(**from_run_config(RECIPES / "kk-smollm2-cpu.yaml", AnalyzeConfig) | {"max_grad_norm": 0.5})
    assert smollm2.model == "smollm2-135m" and smollm2.adam_lr == 1e-6 and smollm2.weight_decay == 0.01
    assert smollm2.max_grad_norm == 0.5  # the command line over the recipe
    assert smollm2.temperature == AnalyzeConfig().temperature  # not in RUN_KEYS: the trainer's keys stay its own


def test_method_settings_come_from_a_run_config_under_the_trainers_keys(tmp_path):
    from lopti.commands.settings import from_run_config

    run = tmp_path / "config.yaml"
    run.write_text(
        "ar_alpha: 0.2\nlopti_eta: 0.4\nepsilon: 0.1\nepsilon_high: null\ndual_clip: 3.0\nnum_generations: 4\n"
    )
    config = AnalyzeConfig(**from_run_config(run, AnalyzeConfig) | {"lopti_eta": 0.6})
    assert (config.ar_alpha, config.lopti_eta, config.epsilon, config.epsilon_high, config.dual_clip) == (
        0.2, 0.6, 0.1, None, 3.0,
    )  # fmt: skip
    assert config.num_generations == 8  # the probe's batches are its own
    assert probe.upper_clip(config) == 0.1  # epsilon_high null: epsilon, as in TRL
    advantages = torch.ones(1, 1)
    assert probe.method_update("ar", advantages, config).alpha == 0.2
    assert probe.method_update("ar", advantages, replace(config, ar_alpha=0.0)).alpha == 0.3  # a GRPO run's 0
    assert (AnalyzeConfig().task, AnalyzeConfig().ar_alpha) == ("kk", 0.3)  # the default model's task, and its α
    assert AnalyzeConfig(task="math", ar_alpha=0.0).ar_alpha == 0.1


def test_dual_clip_does_not_bind_in_the_probe_so_its_default_is_off(rollouts_file, tmp_path, monkeypatch):
    # Each update starts at ratio 1 and Lopti's second step moves only tokens of π_old ≥ lopti_eta, whose ratio
    # stays ≤ 1 / lopti_eta: the paper's c = 10 and no dual clip give the same numbers, even for large steps. The
    # untrained tiny model gives its tokens π near 1 / vocabulary, so η at that level splits them in two.
    config, path = rollouts_file
    vocabulary = json.loads((Path(config.model) / "config.json").read_text())["vocab_size"]
    config = replace(
        config, rollouts=str(path), prompts=1, batches=2, optimizers="sgd,adamw,adamw_warm", warmup_updates=1,
        methods="grpo,ar,lopti,ar+lopti", lr=1.0, adam_lr=0.05, lopti_eta=1.0 / vocabulary,
    )  # fmt: skip
    assert ProbeConfig().dual_clip is None
    ratios = []
    objective = probe.token_objective

    def recording(logp, old, advantages, mask, **kwargs):
        trained = mask & (advantages < 0)  # the tokens dual clip acts on: negative advantage, in this phase
        if kwargs["phase"] is not None:
            trained &= (old.exp() < kwargs["eta"]) == (kwargs["phase"] == 0)
        ratios.extend((logp.detach() - old).exp()[trained].tolist())
        return objective(logp, old, advantages, mask, **kwargs)

    monkeypatch.setattr(probe, "token_objective", recording)
    off = analyze(replace(config, dual_clip=None), tmp_path / "off")
    assert max(ratios) <= 1 / config.lopti_eta and max(ratios) > 1.0 + 1e-6  # Lopti's second steps move
    paper = analyze(replace(config, dual_clip=10.0), tmp_path / "paper")
    assert paper["updates"] == off["updates"]
    binding = analyze(replace(config, dual_clip=1.0 + 1e-9), tmp_path / "binding")  # the check is able to fail
    assert binding["updates"] != off["updates"]


def test_rollouts_files_name_the_group_size_num_generations_or_group_size(tmp_path):
    tokenizer = type("Tok", (), {"get_vocab": lambda self: {"a": 0, "b": 1, "c": 2}, "__len__": lambda self: 3})()
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=0.7)
    save_rollouts(rollouts, tokenizer, tmp_path / "r.jsonl")
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["num_generations"] == 2
    header["group_size"] = header.pop("num_generations")  # as the files in results/analysis/ hold it
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert load_rollouts(tmp_path / "old.jsonl", tokenizer) == rollouts


def test_analyze_takes_each_tasks_settings_of_both_splits_and_none_of_one_split_alone():
    # the batches are generated training prompts of the probe's own count: a split's size or file would do nothing
    from dataclasses import fields

    from lopti.tasks.registry import TASKS

    flags = {item.name for item in fields(AnalyzeConfig) if item.init}
    for task in TASKS.values():
        one_split = {*task.data.training_only, *task.data.evaluation_only}
        both = {item.name for item in fields(task.data) if item.init} - one_split
        assert both <= flags and not one_split & flags, task.name
    assert AnalyzeConfig(people="3,4").people == "3,4" and AnalyzeConfig(task="math", levels="2").levels == "2"
