"""lopti's console, model card and report additions: compact lines, quiet warnings, its own README.md."""

import json
import warnings
from types import SimpleNamespace

import pytest
from transformers import PrinterCallback, ProgressCallback, TrainerState

from lopti import cli
from lopti.commands import train_run as run_module
from lopti.commands.model_card import write_model_card
from lopti.commands.report import write_report
from lopti.commands.settings import RunConfig, split
from lopti.console import SFT_COLUMNS, ConsoleCallback, compact_line, rl_columns
from lopti.cpu import CpuLoptiGRPOTrainer
from lopti.evaluation.scoring import summarise
from lopti.tasks.registry import get_task
from lopti.train.config import LoptiGRPOConfig

QUARTILES = [0.0, 0.25, 0.5, 0.75, 1.0]
RL_LOG = {
    "loss": 0.0123,
    "reward": 0.5234,
    "rewards/kk_partial/mean": 0.5234,
    "rewards/kk_accuracy/mean": 0.125,
    "kl": 0.001234,
    "entropy": 1.9,
    "probs/grad_share_[0.00,0.25)": 0.612,
    "probs/grad_share_[0.25,0.50)": 0.2,
    "probs/grad_share_[0.50,0.75)": 0.15,
    "probs/grad_share_[0.75,1.00]": 0.038,
    "learning_rate": 1e-4,
}


def test_the_compact_line_shows_reward_accuracy_low_probability_gradient_share_kl_and_time():
    columns = rl_columns(get_task("kk").accuracy_metric(), QUARTILES)
    line = compact_line(RL_LOG, 7, 80, columns, 4.06)
    assert line == "step  7/80 · reward 0.523 · accuracy 12.5% · grad π<0.25 61.2% · kl 0.00123 · 4.1 s/step"


def test_a_log_without_some_columns_leaves_them_out():
    # Lopti's second pass generates nothing: no reward, no accuracy; the first log has no timing yet
    phase_two = {k: v for k, v in RL_LOG.items() if not k.startswith("reward") and k != "kl"}
    line = compact_line(phase_two, 2, 80, rl_columns(get_task("kk").accuracy_metric(), QUARTILES), None)
    assert line == "step  2/80 · grad π<0.25 61.2%"


def test_math_accuracy_and_other_bucket_edges_name_their_own_keys():
    columns = rl_columns(get_task("math").accuracy_metric(), [0.0, 0.1, 1.0])
    logs = {"reward": 1.0, "rewards/math/mean": 0.75, "probs/grad_share_[0.00,0.10)": 0.5}
    assert compact_line(logs, 3, 3, columns, None) == "step 3/3 · reward 1.000 · accuracy 75.0% · grad π<0.1 50.0%"


def test_evaluation_logs_read_the_same_columns():
    logs = {"eval_reward": 0.25, "eval_rewards/kk_accuracy/mean": 0.5}
    assert compact_line(logs, 4, 10, rl_columns(get_task("kk").accuracy_metric(), QUARTILES), None) == (
        "eval step  4/10 · reward 0.250 · accuracy 50.0%"
    )


def test_the_callback_prints_one_compact_line_per_log_and_no_dict(capsys):
    callback = ConsoleCallback("warm start (SFT)", SFT_COLUMNS)
    args, state = SimpleNamespace(disable_tqdm=True), TrainerState(max_steps=50)
    callback.on_train_begin(args, state, None)
    for step, loss in ((25, 2.5), (50, 1.25)):
        state.global_step = step
        callback.on_step_end(args, state, None)
        callback.on_log(args, state, None, logs={"loss": loss, "mean_token_accuracy": 0.5, "grad_norm": 3.0})
    callback.on_log(args, state, None, logs={"train_runtime": 12.0, "train_loss": 1.9})
    callback.on_train_end(args, state, None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "warm start (SFT): 50 steps"
    assert [line.split(" · ")[:3] for line in lines[1:3]] == [
        ["step 25/50", "loss 2.5", "token accuracy 50.0%"],
        ["step 50/50", "loss 1.25", "token accuracy 50.0%"],
    ]
    assert all(line.endswith(" s/step") for line in lines[1:3])
    assert lines[3] == "warm start (SFT): finished at step 50 (12 s)"
    assert len(lines) == 4


def test_third_party_future_warnings_are_hidden_and_lopti_warnings_shown(monkeypatch):
    def fake_eval(args):
        warnings.warn_explicit(
            "`x` is deprecated", FutureWarning, "modeling_utils.py", 1, "transformers.modeling_utils"
        )
        warnings.warn_explicit("TRL will change", DeprecationWarning, "grpo_trainer.py", 1, "trl.trainer.grpo_trainer")
        warnings.warn_explicit("lopti: check this", UserWarning, "run.py", 1, "lopti.commands.train_run")
        warnings.warn_explicit("lopti: old flag", FutureWarning, "cli.py", 1, "lopti.cli")

    monkeypatch.setattr(cli, "_eval", fake_eval)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["eval", "--model", "tiny"]) == 0
    assert [str(w.message) for w in caught] == ["lopti: check this", "lopti: old flag"]


def fake_eval_result(accuracies: dict[str, list[bool]]) -> dict:
    records = [
        {"id": f"{people}-{i}", "group": people, "correct": [right], "well_formed": [True], "length": [10]}
        for people, rights in accuracies.items()
        for i, right in enumerate(rights)
    ]
    return summarise(records, "people", samples=1, temperature=0.0)


@pytest.fixture
def recipe_args(tmp_path):
    return LoptiGRPOConfig(
        output_dir=str(tmp_path), ar_alpha=0.3, lopti=True, num_iterations=2, lopti_eta=0.5, dual_clip=10.0,
        advantage_estimator="grpo", learning_rate=1e-4, lr_scheduler_type="constant", max_steps=80,
        per_device_train_batch_size=64, num_generations=8, epsilon_high=0.24, use_cpu=True, bf16=False, report_to=[],
    )  # fmt: skip


def test_the_model_card_names_base_model_method_settings_held_out_table_and_how_to_load(tmp_path, recipe_args):
    run = RunConfig(
        model="org/base-model", task="kk", people="3-4", rewards=["partial"], template="terse", train_puzzles=2000
    )
    (tmp_path / "eval_before.json").write_text(json.dumps(fake_eval_result({"3": [True] + [False] * 9})))
    (tmp_path / "eval_after.json").write_text(json.dumps(fake_eval_result({"3": [True] * 3 + [False] * 7})))
    card = write_model_card(tmp_path, run, get_task(run.task), recipe_args).read_text()
    assert "base_model: org/base-model" in card.split("---")[1]  # the hub's metadata block
    assert "| method | GRPO + AR (α = 0.3) + Lopti (η = 0.5, low-probability tokens first) |" in card
    assert "| learning rate | 0.0001 (constant schedule) |" in card
    assert "| optimizer steps | 80 |" in card
    assert "| generated batch | 8 prompts × 8 completions |" in card
    assert "| clipping | ε 0.2 / 0.24, dual clip 10 |" in card
    assert "| 3 | 10 | 10.0% | 30.0% | +20.0 pts | 0.0% |" in card
    assert f'model = AutoModelForCausalLM.from_pretrained("{tmp_path / "final"}")' in card
    assert "[None]" not in card and "time machine" not in card


def test_a_card_without_evaluation_or_ar_says_so(tmp_path):
    args = LoptiGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], num_generations=8)
    run = RunConfig(model="tiny")
    card = write_model_card(tmp_path, run, get_task(run.task), args).read_text()
    assert "base_model" not in card  # an embedded model is not on the hub
    assert "| method | GRPO |" in card and "| Lopti | off |" in card
    assert "Held-out" not in card


def test_the_report_adds_the_method_and_the_gradient_share_plot(tmp_path):
    shares = [0.7, 0.1, 0.1, 0.1]
    with (tmp_path / "metrics.jsonl").open("w") as handle:
        for step in range(1, 5):
            keys = [k for k in RL_LOG if k.startswith("probs/grad_share_")]
            handle.write(json.dumps({"step": step, "reward": 0.5, **dict(zip(keys, shares, strict=True))}) + "\n")
    evaluation = fake_eval_result({"3": [True, False]})
    report = write_report(tmp_path, evaluation, evaluation, {"train": 1.0}, "GRPO + AR (α = 0.3)").read_text()
    assert "Method: GRPO + AR (α = 0.3)." in report
    assert "![gradient share](gradient_share.png)" in report
    assert (tmp_path / "gradient_share.png").stat().st_size > 0


def test_a_report_without_gradient_shares_has_no_such_plot(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    evaluation = fake_eval_result({"3": [True, False]})
    report = write_report(tmp_path, evaluation, evaluation, {"train": 1.0}, "GRPO").read_text()
    assert "gradient share" not in report and not (tmp_path / "gradient_share.png").exists()


def hash_reward(completions, completion_ids, **kwargs):
    """Different completions get different rewards, so even a random model gets a learning signal."""
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


def test_lopti_train_prints_compact_lines_and_writes_its_own_card(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_module, "task_rewards", lambda task, run, weights, tokenizer=None: ([hash_reward], [1.0]))
    settings = dict(
        model=str(tiny_model_dir), task="kk", template="compact", people="3", train_puzzles=16, eval_puzzles=2,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=8, max_steps=2,
        save_strategy="steps", save_steps=2, logging_steps=1, use_cpu=True, bf16=False, report_to=[],
        seed=0, lopti=True, num_iterations=2, ar_alpha=0.3, evaluate=True, eval_max_new_tokens=8,
        disable_tqdm=True, output_dir=str(tmp_path / "run"),
    )  # fmt: skip
    run, trainer_kwargs = split(settings)
    trainer = run_module.build_trainer(get_task(run.task), run, LoptiGRPOConfig(**trainer_kwargs)).trainer
    assert isinstance(trainer, CpuLoptiGRPOTrainer)  # on the CPU, lopti train takes the fast path
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert ConsoleCallback in kinds and not kinds & {ProgressCallback, PrinterCallback}
    # what a checkpoint does: TRL's _save_checkpoint writes TRL's card, then the Trainer calls the callbacks' on_save
    trainer.create_model_card(model_name="run")
    assert "| method |" not in (tmp_path / "run" / "README.md").read_text()
    trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)
    assert "| method | GRPO + AR (α = 0.3)" in (tmp_path / "run" / "README.md").read_text()
    capsys.readouterr()

    run_dir = run_module.train(settings)
    out = capsys.readouterr().out
    assert "{" not in out
    logs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step_lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(step_lines) == len([log for log in logs if "train_runtime" not in log]) == 2
    assert step_lines[0].startswith("step 1/2 · reward ") and "grad π<0.25" in step_lines[0]
    card = (run_dir / "README.md").read_text()  # TRL writes its card there at every checkpoint
    assert "| method | GRPO + AR (α = 0.3) + Lopti (η = 0.5, low-probability tokens first) |" in card
    assert "## Held-out accuracy" in card and "[None]" not in card
    assert "![gradient share](gradient_share.png)" in (run_dir / "report.md").read_text()
