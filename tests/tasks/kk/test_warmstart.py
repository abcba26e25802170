"""The warm start's SFT data: every answer is the solution; stage 1 always reasons first, stage 2 on a share."""

import pytest

from lopti.tasks.kk.logic import canonical_key
from lopti.tasks.kk.rewards import accuracy, logic_rl_score
from lopti.tasks.kk.warmstart import WarmStartConfig, sft_arguments, sft_dataset, stage_records


def check_answers(rows, records) -> int:
    """Assert every completion ends with its puzzle's solution and earns the paper's full reward; return how many
    reason first (their last try is the solution)."""
    by_prompt = {r["prompt"][-1]["content"]: r for r in records}
    traced = 0
    for row in rows:
        record = by_prompt[row["prompt"]]
        worked, _, answer = row["completion"].partition("</think>")
        assert answer == f"\n<answer>\n{record['solution_text']}\n</answer>"
        if worked:
            traced += 1
            last_try = [line for line in worked.splitlines() if line][-len(record["solution"]) - 1]
            assert last_try.split(" ")[1] == "".join("K" if k else "N" for k in record["solution"])
        text = "<think>" + row["completion"]  # the prompt pre-fills "<think>"
        assert accuracy(text, record["names"], record["solution"]) == 1.0
        assert logic_rl_score(text, record["names"], record["solution"]) == 3.0
    return traced


def test_stage_one_reasons_on_every_copy_each_with_its_own_trace():
    config = WarmStartConfig(puzzles_per_size=100, copies=2)
    rows = sft_dataset(config, "reason")
    assert len(rows) == 200
    assert check_answers(rows, stage_records(config, "reason")) == 200
    by_prompt: dict[str, set[str]] = {}
    for row in rows:
        by_prompt.setdefault(row["prompt"], set()).add(row["completion"])
    assert len(by_prompt) == 100 and sum(len(c) == 2 for c in by_prompt.values()) > 80  # the copies differ


def test_stage_two_answers_at_once_except_on_the_trace_share_and_uses_other_puzzles():
    config = WarmStartConfig(puzzles_per_size=300, answer_puzzles=600, trace_share=0.3)
    rows = sft_dataset(config, "answer")
    assert len(rows) == 600
    traced = check_answers(rows, stage_records(config, "answer"))
    assert 0.24 < traced / len(rows) < 0.36  # 600 draws of 0.3: within ~3 standard deviations
    assert sft_dataset(config, "answer")["completion"] == rows["completion"]  # deterministic
    first = {canonical_key(r["statements"]) for r in stage_records(config, "reason")}
    second = {canonical_key(r["statements"]) for r in stage_records(config, "answer")}
    assert len(first & second) < 0.2 * len(second)  # another draw of puzzles (training forms overlap by chance)


def test_the_varied_form_writes_its_stage_one_traces_varied_and_still_right():
    config = WarmStartConfig(puzzles_per_size=100, copies=1, trace_form="varied")
    rows = sft_dataset(config, "reason")
    assert check_answers(rows, stage_records(config, "reason")) == 100
    plain = sft_dataset(WarmStartConfig(puzzles_per_size=100, copies=1), "reason")
    assert sorted(rows["prompt"]) == sorted(plain["prompt"])  # the same puzzles
    assert sum(" knight " in c or " knave " in c for c in rows["completion"]) > 50  # roles as words: varied
    assert not any(" knight " in c or " knave " in c for c in plain["completion"])


def test_stage_two_is_drawn_in_random_order_so_its_batches_mix_traces_and_immediate_answers(tmp_path):
    config = WarmStartConfig(bf16=False)
    stage_one, stage_two = (sft_arguments(config, stage, 1e-3, tmp_path) for stage in ("reason", "answer"))
    assert stage_one.train_sampling_strategy == "group_by_length"
    assert stage_two.train_sampling_strategy == "random"
    assert (stage_two.learning_rate, stage_two.completion_only_loss, stage_two.num_train_epochs) == (1e-3, True, 1.0)


@pytest.mark.parametrize(
    "setting, stage, message",
    [(dict(trace_share=-0.1), "answer", "trace_share must be in"), (dict(trace_share=1.5), "answer",
     "trace_share must be in"), (dict(copies=0), "reason", "copies must be a whole number"),
     ({}, "later", "stage must be one of reason, answer"), (dict(trace_form="fancy"), "reason",
     "trace_form must be one of plain, varied, got 'fancy'")],
)  # fmt: skip
def test_a_bad_warm_start_setting_is_refused_in_one_line(setting, stage, message):
    with pytest.raises(ValueError, match=f"warm start {message}"):
        sft_dataset(WarmStartConfig(puzzles_per_size=5, answer_puzzles=5, **setting), stage)


def test_stage_one_is_kept_and_a_second_build_trains_only_stage_two(tmp_path, tiny_model_dir, monkeypatch):
    from lopti.tasks.kk import warmstart

    config = WarmStartConfig(puzzles_per_size=8, copies=1, answer_puzzles=8, batch_size=8, bf16=False)
    stages = []
    real = warmstart.sft_dataset
    monkeypatch.setattr(warmstart, "sft_dataset", lambda c, stage: stages.append(stage) or real(c, stage))
    warmstart.warm_start(tiny_model_dir, tmp_path / "first", config, stage_one=tmp_path / "stage-one")
    assert stages == ["reason", "answer"] and (tmp_path / "stage-one" / "model.safetensors").is_file()
    warmstart.warm_start(tiny_model_dir, tmp_path / "second", config, stage_one=tmp_path / "stage-one")
    assert stages == ["reason", "answer", "answer"]  # stage 1 came from the kept folder
    first, second = ((tmp_path / name / "model.safetensors").read_bytes() for name in ("first", "second"))
    assert first == second  # stage 2 from the kept stage 1 gives the same model
