from dataclasses import fields

import pytest

from lopti.train.config import LoptiGRPOConfig

BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to=[])


def config(**overrides):
    return LoptiGRPOConfig(**{**BASE, **overrides})


def test_defaults_are_plain_grpo():
    c = config()
    assert (c.ar_alpha, c.lopti, c.advantage_estimator, c.dual_clip) == (0.0, False, None, None)


def test_setting_only_beta_gives_the_papers_kl():
    # GRPOConfig's default use_bias_correction_kl=True would multiply the k3 KL by π/π_old.
    c = config(beta=0.04)
    assert (c.kl_estimator, c.use_bias_correction_kl) == ("k3", False)
    help_text = next(f.metadata["help"] for f in fields(LoptiGRPOConfig) if f.name == "use_bias_correction_kl")
    assert "Off by default" in help_text and "docs/paper.md §2" in help_text


def test_valid_lopti_setup():
    c = config(lopti=True, num_iterations=2, ar_alpha=0.3, dual_clip=10.0, advantage_estimator="grpo")
    assert c.lopti and c.num_iterations == 2 and c.lopti_split == "probability"
    for split in ("random", "none"):  # Lopti's controls: the same schedule
        assert config(lopti=True, num_iterations=2, lopti_split=split).lopti_split == split
    with pytest.raises(ValueError, match="set num_iterations=2 \\(got 1\\)"):
        config(lopti=True, lopti_split="none")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(ar_alpha=1.5), "ar_alpha must be in \\[0, 1\\], got 1.5"),
        (dict(lopti_eta=1.0), "lopti_eta must be in \\(0, 1\\)"),
        (dict(lopti_order="middle_first"), "lopti_order must be one of"),
        (
            dict(lopti_split="sideways"),
            "lopti_split must be one of \\('probability', 'random', 'none'\\), got 'sideways'",
        ),
        (
            dict(lopti_split="none"),
            "lopti_split='none' chooses the tokens of Lopti's two passes, so it needs lopti=True",
        ),
        (dict(advantage_estimator="ppo"), "advantage_estimator must be None or one of"),
        (dict(dual_clip=0.5), "dual_clip must be > 1"),
        (dict(max_weight_growth=1.0), "max_weight_growth must be > 1 or None \\(no check\\), got 1.0"),
        (dict(lopti=True), "set num_iterations=2 \\(got 1\\)"),
        (dict(lopti=True, num_iterations=2, importance_sampling_level="sequence"), "importance_sampling_level"),
        (
            dict(
                lopti=True,
                num_iterations=2,
                gradient_accumulation_steps=2,
                steps_per_generation=3,
                per_device_train_batch_size=8,
            ),
            "steps_per_generation \\(3\\) must be a multiple of gradient_accumulation_steps \\(2\\)",
        ),
        (
            dict(lopti=True, num_iterations=2, save_strategy="steps", save_steps=3),
            "save_steps \\(3\\) must be a multiple of .* = 2",
        ),
        (  # 1.0 is one step, as 1 is (below 1 a share of the run's steps)
            dict(lopti=True, num_iterations=2, save_strategy="steps", save_steps=1.0),
            "save_steps \\(1.0\\) must be a multiple of .* = 2",
        ),
        (
            dict(per_device_train_batch_size=6, num_generations=4),
            "per_device_train_batch_size 6 × 1 process\\(es\\) × steps_per_generation 1 = 6",
        ),
    ],
)
def test_invalid_settings_say_what_to_do(overrides, message):
    with pytest.raises(ValueError, match=message):
        config(**overrides)


def test_an_unusable_output_folder_or_report_to_is_refused_when_the_config_is_made(tmp_path):
    # transformers itself accepts both here and fails only once the trainer is built, after the model is loaded
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"output_dir .*file is a file, not a folder"):
        config(output_dir=str(tmp_path / "file"))
    with pytest.raises(ValueError, match=r"report_to 'nonsense' is unknown; choose from .*tensorboard"):
        config(output_dir=str(tmp_path / "run"), report_to="nonsense")
    assert config(output_dir=str(tmp_path / "run"), report_to=["none"]).output_dir == str(tmp_path / "run")
    assert not (tmp_path / "run").exists()  # checking the folder creates nothing


def test_all_problems_reported_at_once():
    with pytest.raises(ValueError) as error:
        config(ar_alpha=-1.0, lopti_eta=0.0)
    assert "ar_alpha" in str(error.value) and "lopti_eta" in str(error.value)


def test_token_credit_presets_from_a_list_a_string_or_the_command_line():
    from transformers import HfArgumentParser

    assert config(token_credit="stapo+high_entropy").token_credit == ["stapo", "high_entropy"]
    assert config(token_credit="stapo, kl_cov").token_credit == ["stapo", "kl_cov"]
    (parsed,) = HfArgumentParser(LoptiGRPOConfig).parse_args_into_dataclasses(
        ["--output_dir", "unused", "--use_cpu", "--bf16", "false", "--report_to", "none", "--token_credit", "stapo",
         "--token_credit_kwargs", '{"stapo": {"prob_threshold": 0.02}}']
    )  # fmt: skip
    assert parsed.token_credit == ["stapo"] and parsed.token_credit_kwargs == {"stapo": {"prob_threshold": 0.02}}
    assert config().token_credit_kwargs == {} and config(token_credit_kwargs=None).token_credit_kwargs == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(token_credit=["stapo", "entropy20"]), "token_credit: unknown preset 'entropy20'; choose from stapo"),
        (dict(token_credit=["clip_cov", "kl_cov"]), "token_credit combines 'clip_cov' and 'kl_cov'"),
        (dict(token_credit=["tr_grpo"], ar_alpha=0.2), "token_credit 'tr_grpo' with ar_alpha=0.2"),
        (dict(token_credit_kwargs={"stare": {"top_ratio": 0.2}}), "token_credit_kwargs.stare: 'stare' is not in"),
        (
            dict(token_credit=["high_entropy"], token_credit_kwargs={"high_entropy": {"rho": 0}}),
            "token_credit_kwargs.high_entropy: rho must be in \\(0, 1\\], got 0",
        ),
        (
            dict(token_credit=["stapo"], token_credit_kwargs={"stapo": {"prob_threshold": "low"}}),
            "token_credit_kwargs.stapo: constants must be numbers or true/false, got prob_threshold='low'",
        ),
    ],
)
def test_token_credit_problems_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        config(**overrides)
