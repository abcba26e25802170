"""`lopti eval`: metrics per group, resumption after an interruption, refusal of foreign folders."""

import json
import shutil
import time
from dataclasses import replace

import pytest
import yaml

from lopti.cli import main
from lopti.commands import eval_run
from lopti.commands.eval_run import EvalConfig, held_out_rows, run_eval
from lopti.commands.settings import RunConfig, from_run_config, split
from lopti.errors import TrainingStopped
from lopti.evaluation import scoring
from lopti.tasks.registry import get_task


@pytest.fixture
def config(tiny_model_dir):
    return EvalConfig(
        model=str(tiny_model_dir), task="kk", people="2-3", eval_puzzles=3, template="compact", samples=2,
        temperature=1.0, eval_max_new_tokens=8, batch_size=4,
    )  # fmt: skip


def test_metrics_per_group_and_files(config, tmp_path):
    result = run_eval(config, tmp_path / "ev", chunk=2)
    assert result["group"] == "people" and set(result["per_group"]) == {"2", "3"}
    assert [result["per_group"][k]["n"] for k in ("2", "3")] == [3, 3] and result["overall"]["n"] == 6
    assert set(result["overall"]) >= {"accuracy", "pass@1", "pass@2", "format_error", "length"}
    records = [json.loads(line) for line in (tmp_path / "ev" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(len(r["correct"]) == 2 and len(r["length"]) == 2 for r in records)
    assert result["overall"]["length"] == sum(sum(r["length"]) for r in records) / 12
    assert "| all | 6 |" in (tmp_path / "ev" / "eval.md").read_text()


def test_interrupted_evaluation_resumes_to_the_same_records(config, tmp_path):
    run_eval(config, tmp_path / "whole", chunk=2)
    whole = (tmp_path / "whole" / "records.jsonl").read_text().splitlines()
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    # an interruption after the first chunk, in the middle of writing the second
    (tmp_path / "cut" / "records.jsonl").write_text("\n".join(whole[:2]) + "\n" + whole[2][:15])
    (tmp_path / "cut" / "eval.json").unlink()
    result = run_eval(config, tmp_path / "cut", chunk=2)
    assert (tmp_path / "cut" / "records.jsonl").read_text().splitlines() == whole
    assert result == json.loads((tmp_path / "whole" / "eval.json").read_text())


def test_other_settings_or_foreign_folder_are_refused(config, tmp_path):
    run_eval(config, tmp_path / "ev", chunk=2)
    before = (tmp_path / "ev" / "records.jsonl").read_text()
    config.temperature = 0.5
    with pytest.raises(ValueError, match=r"other settings \(temperature: 1.0 there, 0.5 now\)"):
        run_eval(config, tmp_path / "ev")
    assert (tmp_path / "ev" / "records.jsonl").read_text() == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no lopti evaluation"):
        run_eval(config, tmp_path / "other")


def test_held_out_rows_match_lopti_train(config):
    run = RunConfig(task="kk", people="2-3", eval_people="3-4", eval_puzzles=3, template="compact", train_puzzles=5)
    rows = held_out_rows(replace(config, eval_people="3-4"))  # and 900 training puzzles, which change nothing
    assert rows == get_task("kk").rows(run)[1] and sorted({r["people"] for r in rows}) == [3, 4]


def test_settings_from_a_run_config_then_the_command_line(tiny_model_dir, tmp_path, monkeypatch):
    run_config = {
        "model": "tiny", "task": "kk", "people": "2-3", "eval_people": "3", "eval_puzzles": 2, "template": "compact",
        "fixed_names": True, "data_seed": 4, "eval_max_new_tokens": 6, "train_puzzles": 7,
        "temperature": 0.9, "seed": 11, "learning_rate": 0.1, "max_steps": 2,  # the trainer's: not evaluation's
        "bf16": False,  # the trainer's too, and the precision the run's own evaluation decoded in
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(run_config))
    seen = []
    monkeypatch.setattr(eval_run, "run_eval", lambda config, out: seen.append(config) or {})
    monkeypatch.setattr(eval_run, "eval_markdown", lambda result, config: "")
    model = ["--model", str(tiny_model_dir)]
    assert main(["eval", *model, "--config", str(path), "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", *model, "--config", str(path), "--eval_puzzles", "1", "--eval_max_new_tokens", "9"]) == 0
    first, second = seen
    assert (first.model, first.people, first.eval_people, first.eval_puzzles) == (str(tiny_model_dir), "2-3", "3", 2)
    assert (first.template, first.fixed_names, first.data_seed, first.eval_max_new_tokens) == ("compact", True, 4, 6)
    assert (first.temperature, first.seed, first.samples, first.bf16) == (0.0, 0, 1, False)
    assert (second.eval_puzzles, second.eval_max_new_tokens, second.people) == (1, 9, "2-3")
    run, _ = split({**run_config, "output_dir": str(tmp_path / "run")})
    assert held_out_rows(first) == get_task("kk").rows(run)[1]  # the set `lopti train` evaluated on


def test_a_folder_whose_settings_name_n_and_max_new_tokens_and_lack_later_keys_is_continued(config, tmp_path):
    result = run_eval(config, tmp_path / "ev", chunk=2)
    stored = json.loads((tmp_path / "ev" / "settings.json").read_text())
    stored["n"] = stored.pop("eval_puzzles")
    stored["max_new_tokens"] = stored.pop("eval_max_new_tokens")
    for later in ("eval_people", "reward_errors", "reward_timeout", "backend"):  # written before these existed
        del stored[later]
    (tmp_path / "ev" / "settings.json").write_text(json.dumps(stored))
    assert run_eval(config, tmp_path / "ev") == result
    assert json.loads((tmp_path / "ev" / "settings.json").read_text())["eval_puzzles"] == 3
    assert json.loads((tmp_path / "ev" / "settings.json").read_text())["eval_max_new_tokens"] == 8
    stored["n"] = 4
    (tmp_path / "ev" / "settings.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=r"other settings \(eval_puzzles: 4 there, 3 now\)"):
        run_eval(config, tmp_path / "ev")


def test_cli_bad_input_is_one_line(tiny_model_dir, tmp_path, capsys):
    no_tokenizer = tmp_path / "weights-only"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, no_tokenizer)
    assert main(["eval", "--model", str(no_tokenizer), "--out", str(tmp_path / "a")]) == 2
    kk = ["eval", "--model", str(tiny_model_dir), "--task", "kk"]
    assert main([*kk, "--people", "2-13", "--out", str(tmp_path / "b")]) == 2
    assert main(["eval", "--model", str(tiny_model_dir), "--samples", "4", "--out", str(tmp_path / "c")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert "tokenizer" in lines[0]
    assert "people must be from 2 to 12" in lines[1]
    assert "needs a temperature above 0" in lines[2]


def test_cli_eval_math_from_a_recipe(tiny_model_dir, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("task: math\nlevels: '2-3'\neval_puzzles: 2\ntemplate: raw\neval_max_new_tokens: 4\n")
    out = tmp_path / "ev"
    assert main(["eval", "--model", str(tiny_model_dir), "--config", str(recipe), "--out", str(out)]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert result["group"] == "level" and result["per_group"]["3"]["n"] == 2
    operations = result["breakdown"]["operation"]  # the same prompts, by the operation each asks for
    assert sum(stats["n"] for stats in operations.values()) == 4 and "linear equation" in operations
    table = (out / "eval.md").read_text()
    assert "| operation | prompts |" in table and "| linear equation | 2 |" in table
    assert json.loads((out / "settings.json").read_text())["template"] == "raw"


def test_sampled_evaluation_leaves_the_trainers_random_stream_alone(tiny_model_dir):
    import torch

    from lopti.evaluation.generation import generate
    from lopti.models.loading import load_model, load_tokenizer

    model, tokenizer = load_model(str(tiny_model_dir)), load_tokenizer(str(tiny_model_dir))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = generate(model, tokenizer, ["(1) Aaron:", "(2) Abigail:"], samples=2, temperature=1.0, max_new_tokens=4)
    assert torch.equal(torch.rand(3), expected)  # as if nothing had been sampled
    assert (
        generate(model, tokenizer, ["(1) Aaron:", "(2) Abigail:"], samples=2, temperature=1.0, max_new_tokens=4)
        == first
    )


def answers(texts):
    """A stand-in for `generate`: every prompt answered by `texts` in turn, each ending on its end-of-sequence
    token, so that the judge sees them."""

    def fake_generate(model, tokenizer, prompts, samples, *args):
        eos = tokenizer.eos_token_id
        return [
            [(texts[(i * samples + k) % len(texts)], [7, eos]) for k in range(samples)] for i in range(len(prompts))
        ]

    return fake_generate


def fragile_judge(text, row):
    """A judge that cannot read an answer saying 'poison'."""
    if "poison" in text:
        raise KeyError("names")
    return True, True


def slow_judge(text, row):
    time.sleep(30)
    return True, True


@pytest.fixture
def judged(monkeypatch):
    """Replace the K&K judge by `judged(judge)` and the decoding by `answers`."""
    monkeypatch.setattr(scoring, "generate", answers(["fine</answer>", "poison pill", "fine again</answer>"]))

    def use(judge):
        monkeypatch.setattr(eval_run, "get_task", lambda name: replace(get_task(name), judge=judge))

    return use


def test_a_judge_that_raises_stops_the_evaluation_with_one_line(config, tmp_path, judged, capsys):
    judged(fragile_judge)
    command = ["eval", "--model", config.model, "--task", "kk", "--people", "2-3", "--eval_puzzles", "3"]
    command += ["--template", "compact"]
    assert main([*command, "--eval_max_new_tokens", "8", "--out", str(tmp_path / "ev")]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert line.startswith("stopped: judge 'fragile_judge' raised KeyError: 'names' on completion '")
    assert "poison pill" in line and "set reward_errors: skip to score such samples as wrong" in line


def test_with_skip_an_answer_the_judge_raises_on_is_wrong_and_counted(config, tmp_path, judged):
    judged(fragile_judge)
    result = run_eval(replace(config, reward_errors="skip"), tmp_path / "ev", chunk=2)
    # each chunk of 2 prompts x 2 samples takes the 3 answers in turn: one 'poison pill' per chunk
    assert result["judge_errors"] == 3 and result["overall"]["accuracy"] == 9 / 12
    assert result["overall"]["format_error"] == 3 / 12
    assert "3 answer(s) the judge raised on are scored as wrong" in (tmp_path / "ev" / "eval.md").read_text()
    with pytest.raises(ValueError, match=r"other settings \(reward_errors: 'skip' there, 'stop' now\)"):
        run_eval(config, tmp_path / "ev")  # records scored under skip are not mixed with stop's


def test_a_judge_that_hangs_stops_at_reward_timeout(config, tmp_path, judged):
    judged(slow_judge)
    started = time.monotonic()
    with pytest.raises(TrainingStopped, match=r"^judge 'slow_judge' took more than 0.3 s \(reward_timeout\)"):
        run_eval(replace(config, reward_timeout=0.3), tmp_path / "ev")
    assert time.monotonic() - started < 20


def test_the_limits_come_from_a_run_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", "reward_errors": "skip", "reward_timeout": 2.5}))
    settings = from_run_config(path, EvalConfig)
    assert settings["reward_errors"] == "skip" and settings["reward_timeout"] == 2.5


@pytest.fixture
def decodings(monkeypatch):
    """The dtype of the weights each call of lopti's CPU decoding (`shared_prefill_generate`) generated with."""
    from lopti.cpu import packing

    seen = []
    original = packing.shared_prefill_generate

    def spy(model, *args, **kwargs):
        seen.append(next(model.parameters()).dtype)
        return original(model, *args, **kwargs)

    monkeypatch.setattr(packing, "shared_prefill_generate", spy)
    return seen


def test_on_the_cpu_lopti_eval_decodes_as_lopti_train_evaluates(config, tmp_path, decodings):
    """backend auto: lopti's CPU decoding (the held-out evaluation of lopti train), in fp32 the greedy answers of 🤗
    generate (backend hf); with bf16, on a bf16 copy of the weights."""
    import torch

    greedy = replace(config, samples=1, temperature=0.0, bf16=False)
    ours = run_eval(greedy, tmp_path / "auto")
    assert decodings and set(decodings) == {torch.float32}
    decodings.clear()
    theirs = run_eval(replace(greedy, backend="hf"), tmp_path / "hf")
    assert not decodings and ours == theirs
    run_eval(replace(greedy, bf16=True), tmp_path / "bf16")
    assert decodings and set(decodings) == {torch.bfloat16}


def test_bf16_left_unset_is_the_cpus_choice_and_recorded(config, tmp_path):
    from lopti.cpu import native_bf16

    run_eval(replace(config, samples=1, temperature=0.0), tmp_path / "ev")
    assert json.loads((tmp_path / "ev" / "settings.json").read_text())["bf16"] is native_bf16()
