"""`lopti compare`: variant settings, a small study end to end, skipping, resuming and refusing."""

import json
from pathlib import Path

import pytest
import yaml

from lopti.cli import main
from lopti.commands import train_run as run_module
from lopti.commands.settings import default_recipe
from lopti.experiments import compare
from lopti.experiments.study import variant_settings
from lopti.tasks.registry import DEFAULT_TASK, get_task


def hash_reward(completions, completion_ids, **kwargs):
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


def test_variants_keep_the_number_of_rl_steps():
    base = {"max_steps": 80, "num_iterations": 2, "lopti": True, "ar_alpha": 0.3, "save_steps": 40}
    grpo, ar = variant_settings(base, "grpo", 1), variant_settings(base, "ar", 1)
    lopti, both = variant_settings(base, "lopti", 1), variant_settings(base, "ar+lopti", 1)
    assert (grpo["max_steps"], grpo["num_iterations"], grpo["save_steps"], grpo["ar_alpha"]) == (40, 1, 20, 0.0)
    assert (ar["max_steps"], ar["ar_alpha"], ar["lopti"]) == (40, 0.3, False)
    assert (lopti["max_steps"], lopti["num_iterations"], lopti["ar_alpha"], lopti["lopti"]) == (80, 2, 0.0, True)
    assert (both["max_steps"], both["ar_alpha"], both["seed"], both["evaluate"]) == (80, 0.3, 1, True)
    plain = variant_settings({"task": "kk", "max_steps": 30, "ar_alpha": 0.0}, "ar", 0)
    assert plain["ar_alpha"] == 0.3 and plain["max_steps"] == 30  # a GRPO recipe's 0: its task's own α
    assert variant_settings({"task": "math", "max_steps": 30}, "ar", 0)["ar_alpha"] == 0.1
    assert variant_settings({"max_steps": 30}, "ar", 0)["ar_alpha"] == get_task(DEFAULT_TASK).ar_alpha
    with pytest.raises(ValueError, match="--variants: method 'ppo': unknown part 'ppo'"):
        variant_settings(base, "ppo", 0)
    assert "token_credit" not in grpo and "token_credit" not in both  # as before presets existed


def test_loptis_controls_get_its_schedule_and_their_split():
    base = {"max_steps": 80, "num_iterations": 2, "lopti": True, "ar_alpha": 0.3, "save_steps": 40}
    grpo2, random, ar_random = (variant_settings(base, v, 0) for v in ("grpo2", "lopti_random", "ar+lopti_random"))
    schedule = ("max_steps", "num_iterations", "save_steps", "lopti", "lopti_split", "ar_alpha")
    assert [tuple(s[k] for k in schedule) for s in (grpo2, random, ar_random)] == [
        (80, 2, 40, True, "none", 0.0),
        (80, 2, 40, True, "random", 0.0),
        (80, 2, 40, True, "random", 0.3),
    ]  # twice GRPO's optimizer steps (40), on as many generated batches
    assert "lopti_split" not in variant_settings(base, "lopti", 0)  # the paper's variants keep their settings
    assert variant_settings({**base, "lopti_split": "random"}, "lopti", 0)["lopti_split"] == "probability"


def test_preset_variants_replace_the_recipes_token_credit():
    base = {
        "max_steps": 40, "ar_alpha": 0.2, "token_credit": ["clip_cov"],
        "token_credit_kwargs": {"clip_cov": {"clip_ratio": 0.001}, "stapo": {"prob_threshold": 0.02}},
    }  # fmt: skip
    ar_stapo, entropy = variant_settings(base, "ar+stapo", 0), variant_settings(base, "entropy20", 1)
    assert (ar_stapo["ar_alpha"], ar_stapo["lopti"], ar_stapo["token_credit"]) == (0.2, False, ["stapo"])
    assert ar_stapo["token_credit_kwargs"] == {"stapo": {"prob_threshold": 0.02}}  # the recipe's constants stay
    assert (entropy["ar_alpha"], entropy["token_credit"]) == (0.0, ["high_entropy"])
    assert entropy["token_credit_kwargs"] == {"high_entropy": {"rho": 0.2}}
    grpo = variant_settings(base, "grpo", 0)
    assert (grpo["token_credit"], grpo["token_credit_kwargs"]) == ([], {})
    cov = variant_settings(base, "clip_cov+lopti", 0)
    assert (cov["max_steps"], cov["num_iterations"], cov["token_credit"]) == (80, 2, ["clip_cov"])
    assert cov["token_credit_kwargs"] == {"clip_cov": {"clip_ratio": 0.001}}


@pytest.mark.parametrize(
    ("variants", "says"),
    [
        ("grpo,ar+tr_grpo", "--variants: method 'ar+tr_grpo': ar and tr_grpo both shape the weight"),
        ("grpo,grpo+stapo", "--variants: method 'grpo+stapo': 'grpo' is the plain objective"),
        ("stapo,entropy0", "--variants: method 'entropy0': entropy0 needs a share between 1 and 99 percent"),
        ("ar,ar", "--variants: ar listed twice"),
        ("grpo,grpo2,lopti_randm", "--variants: method 'lopti_randm': unknown part 'lopti_randm'"),
        ("grpo2,lopti+lopti_random", "--variants: method 'lopti+lopti_random': lopti and lopti_random each choose"),
    ],
)
def test_bad_variants_fail_before_anything_is_written(tmp_path, capsys, variants, says):
    out = tmp_path / "study"
    assert main(["compare", "--variants", variants, "--out", str(out)]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def test_old_paper_study_folders_still_resume(tmp_path, monkeypatch):
    """A folder the paper-only compare wrote (its compare.json, a finished run) is taken as it is."""
    out, base = tmp_path / "study", {"max_steps": 4, "model": "tiny", "learning_rate": 0.01}
    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump(base))
    old_identity = {"base": base, "variants": ["grpo", "ar+lopti"], "seeds": [0]}
    out.mkdir()
    (out / "compare.json").write_text(json.dumps(old_identity))
    finished = out / "runs" / "grpo-s0"
    finished.mkdir(parents=True)
    for name in ("run.json", "eval_before.json", "eval_after.json", "report.md"):
        (finished / name).write_text("{}")
    trained = []
    monkeypatch.setattr("lopti.cpu.precision.cpu_kind", lambda: "avx2")  # no native bf16
    compare.run_all(config, {}, ["grpo", "ar+lopti"], [0], out, runner=trained.append)
    assert [Path(s["output_dir"]).name for s in trained] == ["ar+lopti-s0"]
    assert trained[0] == variant_settings(base, "ar+lopti", 0) | {
        "bf16": False,  # the CPU's choice, made for the study (the finished run records none)
        "output_dir": str(out / "runs" / "ar+lopti-s0"),
        "resume": False,
    }
    assert "token_credit" not in trained[0] and json.loads((out / "compare.json").read_text()) == old_identity


def test_a_study_grows_by_variants_and_seeds_and_keeps_its_runs(tmp_path):
    """A later command may add variants and seeds to a folder; its finished runs are kept, its base is not changed."""
    out, base = tmp_path / "study", {"max_steps": 4, "model": "tiny", "learning_rate": 0.01}
    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump(base))
    first = []
    compare.run_all(config, {}, ["grpo"], [0], out, runner=first.append)
    finished = out / "runs" / "grpo-s0"
    finished.mkdir(parents=True)
    for name in ("run.json", "eval_before.json", "eval_after.json", "report.md"):
        (finished / name).write_text("{}")
    second = []
    compare.run_all(config, {}, ["stapo", "grpo"], [0, 1], out, runner=second.append)
    assert [Path(s["output_dir"]).name for s in second] == ["stapo-s0", "stapo-s1", "grpo-s1"]
    stored = json.loads((out / "compare.json").read_text())
    assert (stored["variants"], stored["seeds"]) == (["grpo", "stapo"], [0, 1])
    with pytest.raises(ValueError, match="other settings \\(base differs\\)"):
        compare.run_all(config, {"learning_rate": 0.02}, ["grpo"], [0], out, runner=second.append)


def test_cli_takes_its_own_settings_and_gives_the_others_to_every_run(monkeypatch, tmp_path, capsys):
    seen = []

    def run_all(config, overrides, variants, seeds, out, jobs, threads, backend, plan, keep_weights):
        seen.append((config.name, overrides, variants, seeds, out, jobs, threads, backend, keep_weights))
        raise ValueError("training replaced by the test")

    monkeypatch.setattr(compare, "run_all", run_all)
    argv = ["compare", "--seeds", "3", "--variants", "grpo,ar", "--learning_rate", "0.5", "--lopti", "--jobs", "2"]
    assert main([*argv, "--backend", "ray", "--keep_weights", "false", "--out", str(tmp_path / "study")]) == 2
    overrides = {"learning_rate": 0.5, "lopti": True}
    default = default_recipe().name  # the recipe `lopti train` uses by default
    assert seen == [(default, overrides, ["grpo", "ar"], [3], tmp_path / "study", 2, 0, "ray", False)]
    assert main(["compare", "--backend", "spark"]) == 2
    assert "spark" in capsys.readouterr().err and not seen[1:]
    assert main(["compare", "--seeds", "0,x"]) == 2
    assert "seeds must be a whole number, got 'x'" in capsys.readouterr().err


@pytest.fixture
def recipe(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "task_rewards", lambda task, run, weights, tokenizer=None: ([hash_reward], [1.0]))
    settings = dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="2-3", train_puzzles=16, eval_puzzles=2,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=8, max_steps=4,
        save_strategy="steps", save_steps=2, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        learning_rate=1e-2, lopti=True, num_iterations=2, ar_alpha=0.3, disable_tqdm=True, eval_max_new_tokens=4,
    )  # fmt: skip
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_small_study_end_to_end(recipe, tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["compare", "--config", str(recipe), "--variants", "grpo,ar+lopti", "--seeds", "0,1", "--out", str(out)]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["runs"]) == ["ar+lopti-s0", "ar+lopti-s1", "grpo-s0", "grpo-s1"]
    assert results["summary"]["grpo"]["seeds"] == 2 and set(results["summary"]["grpo"]) >= {"2", "3", "all"}
    lines = (out / "runs" / "grpo-s0" / "metrics.jsonl").read_text().splitlines()
    assert max(json.loads(line)["step"] for line in lines) == 2  # half the optimizer steps of Lopti
    report = (out / "results.md").read_text()
    assert "| grpo | 2 |" in report and "| ar+lopti | 2 |" in report and "pts" in report
    assert (out / "curves.png").stat().st_size > 1000
    assert "lopti compare --config" in (out / "command.txt").read_text()

    # rerun: finished runs are skipped; a run that lost its evaluation or report redoes that and trains nothing
    lost_eval, lost_report = out / "runs" / "grpo-s1", out / "runs" / "ar+lopti-s0"
    kept = [(run / "metrics.jsonl").read_text() + str((run / "final" / "model.safetensors").stat().st_mtime_ns)
            for run in (lost_eval, lost_report)]  # fmt: skip
    (lost_eval / "eval_after.json").unlink()
    (lost_report / "report.md").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "grpo-s0: finished, skipped" in printed and "grpo-s1: resuming" in printed
    assert sorted(p.name for p in lost_eval.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert "ar+lopti-s0: resuming" in printed and (lost_report / "report.md").is_file()
    assert [
        (run / "metrics.jsonl").read_text() + str((run / "final" / "model.safetensors").stat().st_mtime_ns)
        for run in (lost_eval, lost_report)
    ] == kept

    # another study in the same folder is refused before anything is touched
    assert main([*argv[:-2], "--out", str(out), "--learning_rate", "0.5"]) == 2
    assert "holds a comparison with other settings (base differs)" in capsys.readouterr().err


def test_small_study_of_loptis_controls(recipe, tmp_path):
    out = tmp_path / "study"
    argv = ["compare", "--config", str(recipe), "--variants", "grpo,grpo2,lopti_random", "--seeds", "0"]
    assert main([*argv, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["summary"]) == ["grpo", "grpo2", "lopti_random"]
    for variant, steps, split in (("grpo", 2, None), ("grpo2", 4, "none"), ("lopti_random", 4, "random")):
        run = out / "runs" / f"{variant}-s0"
        lines = (run / "metrics.jsonl").read_text().splitlines()
        assert max(json.loads(line)["step"] for line in lines) == steps  # the same 2 generated batches each
        settings = yaml.safe_load((run / "config.yaml").read_text())
        assert (settings.get("lopti_split"), settings["num_iterations"]) == (split, 2 if split else 1)
    assert (
        "| method | GRPO + two update passes per batch on every token"
        in (out / "runs" / "grpo2-s0" / "README.md").read_text()
    )
    assert "| grpo2 | 1 |" in (out / "results.md").read_text()


def train_with_weights(settings):
    """Stand in for training: write a run's records and weights (final/, two checkpoints); seed 1 fails after its
    first checkpoint."""
    run_dir = Path(settings["output_dir"])
    for folder in ("checkpoint-2", "checkpoint-4", "final"):
        if folder == "checkpoint-4" and settings["seed"] == 1:
            raise ValueError("stopped")
        (run_dir / folder).mkdir(parents=True)
        (run_dir / folder / "model.safetensors").write_bytes(b"weights")
    evaluation = {"group": "people", "per_group": {}, "overall": {"accuracy": 0.5}}
    for name in ("run.json", "eval_before.json", "eval_after.json", "metrics.jsonl", "report.md"):
        (run_dir / name).write_text(json.dumps(evaluation))


def test_without_keep_weights_a_finished_run_keeps_its_records_and_a_failed_one_its_checkpoints(tmp_path, monkeypatch):
    from lopti.experiments import study

    monkeypatch.setattr(study, "train_settings", train_with_weights)
    out = tmp_path / "study"
    argv = ["compare", "--variants", "grpo", "--seeds", "0,1", "--keep_weights", "false", "--out", str(out)]
    assert main(argv) == 2  # seed 1's error, one line
    finished, failed = out / "runs" / "grpo-s0", out / "runs" / "grpo-s1"
    assert sorted(path.name for path in finished.iterdir()) == [
        "eval_after.json", "eval_before.json", "metrics.jsonl", "report.md", "run.json",
    ]  # fmt: skip
    assert (failed / "checkpoint-2" / "model.safetensors").is_file()


def test_a_study_keeps_its_runs_weights_by_default(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "train_settings", train_with_weights)
    out = tmp_path / "study"
    assert main(["compare", "--variants", "grpo", "--seeds", "0", "--out", str(out)]) == 0
    assert {"final", "checkpoint-2", "checkpoint-4"} <= {path.name for path in (out / "runs" / "grpo-s0").iterdir()}
