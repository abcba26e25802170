"""Bad input to every `lopti` command ends in exit status 2 and one line naming the key, value or path, before
any model is built; interrupted and failed runs end in one line too."""

import errno
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers

from lopti import errors
from lopti.cli import main
from lopti.models import embedded

# One per line: arguments after `lopti`, and what the error line must name. FILE is a plain file, RO a folder
# nobody may write in, TMP the test's folder.
TRAIN = [
    (["--learning_rate", "abc"], "learning_rate must be a number, got 'abc'"),
    (["--learning_rate", "1e-4x"], "learning_rate must be a number, got '1e-4x'"),
    (["--ar_alpha", "abc"], "ar_alpha must be a number, got 'abc'"),
    (["--max_steps", "1.5"], "max_steps must be a whole number, got '1.5'"),
    (["--max_steps", "2.0"], "max_steps must be a whole number, got '2.0'"),
    (["--max_steps", "0"], "max_steps must be ≥ 1 (or -1), got 0"),
    (["--seed", "abc"], "seed must be a whole number, got 'abc'"),
    (["--num_generations", "0"], "num_generations must be ≥ 2, got 0"),
    (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps must be ≥ 1, got 0"),
    (["--num_iterations", "0"], "num_iterations must be ≥ 1, got 0"),
    (["--train_puzzles", "0"], "train_puzzles must be ≥ 1, got 0"),
    (["--per_device_train_batch_size", "-8"], "per_device_train_batch_size must be ≥ 1, got -8"),
    (["--beta", "-1"], "beta must be ≥ 0, got -1"),
    (["--eval_samples", "-1"], "eval_samples must be ≥ 0, got -1"),
    (["--lopti", "maybe"], "lopti must be true or false, got 'maybe'"),
    (["--lopti_split", "sideways"], "lopti_split must be one of ('probability', 'random', 'none'), got 'sideways'"),
    (["--fixed_names", "maybe"], "fixed_names must be true or false, got 'maybe'"),
    (["--task", "kk", "--rewards", "nope"], "unknown kk reward(s) nope; choose from logic_rl, strict, partial"),
    (["--people", "3"], "command line: people is a data setting the math task does not read; its own are levels,"),
    (["--task", "kk", "--levels", "2"], "command line: levels is a data setting the kk task does not read"),
    (["--rewards", "[]"], "unknown math reward(s) []; choose from"),
    (["--rewards", ""], "command line: rewards: empty value"),
    (["--reward_weights", "1", "2"], "command line: reward_weights has 2 entries but rewards has 1"),
    (
        ["--task", "kk", "--rewards", "logic_rl", "strict", "--reward_weights", "1"],
        "reward_weights has 1 entries but rewards has 2",
    ),
    (["--train_puzzles", "1"], "the training set has 1 prompt(s) and one generated batch takes 4"),
    (["--top_k", "-1"], "top_k must be ≥ 0, got -1"),
    (["--min_p", "2"], "min_p must be ≥ 0 and ≤ 1, got 2"),
    (["--repetition_penalty", "0"], "repetition_penalty must be > 0, got 0"),
    (["--lr_scheduler_type", "nonsense"], "lr_scheduler_type must be one of 'linear', 'cosine',"),
    (
        ["--importance_sampling_level", "tokens"],
        "importance_sampling_level must be one of token, sequence, got 'tokens'",
    ),
    (["--eval_puzzles", "0", "--evaluate", "true"], "evaluate: true needs held-out prompts, but eval_puzzles is 0"),
    (["--report_to", "wandb"], "report_to 'wandb': wandb is not installed"),
    (["--output_dir", ""], "output_dir: empty value"),
    (["--output_dir", "FILE"], "output_dir FILE is a file, not a folder"),
    (["--output_dir", "FILE/run"], "output_dir FILE/run cannot be created: FILE is a file"),
    (["--output_dir", "RO/run"], "output_dir RO/run: cannot write in RO"),
    (["--model", "TMP/garbage"], "TMP/garbage: model.safetensors is damaged"),
    (["--config", "TMP/empty.yaml"], "TMP/empty.yaml: the file is empty"),
    (["--config", "TMP/abc.yaml"], "TMP/abc.yaml: learning_rate must be a number, got 'abc'"),
    (["--config", "TMP/binary.yaml"], "TMP/binary.yaml: not a text file"),
    (["--config", "TMP"], "config file TMP is a folder"),
    (["--model", "tiny-base"], f"cache entry TMP/cache/tiny-base-v{embedded.BUILD_VERSION} is a file"),
    (
        ["--task", "kk", "--max_completion_length", "1000000000"],
        "max_completion_length 1000000000: the longest prompt (",
    ),
    (
        ["--task", "kk", "--max_completion_length", "1000"],
        "than the 1024 positions model tiny attends to (max_position_embeddings); set",
    ),
    (["--task", "kk", "--eval_max_new_tokens", "5000"], "eval_max_new_tokens 5000: the longest prompt ("),
]
OTHERS = [
    (["eval", "--model", "tiny", "--batch_size", "0"], "batch_size must be ≥ 1, got 0"),
    (["eval", "--model", "tiny", "--eval_max_new_tokens", "1000000000"], "eval_max_new_tokens 1000000000: the longest"),
    (["eval", "--model", "tiny", "--fixed_names", "maybe"], "fixed_names must be true or false, got 'maybe'"),
    (["eval", "--model", "tiny", "--n", "5"], "unknown key(s) 'n'"),
    (["eval", "--model", "tiny", "--eval_puzles", "5"], "'eval_puzles' (did you mean eval_puzzles"),
    (["eval", "--model", "tiny", "--backend", "gpu"], "backend must be one of 'auto', 'hf', got 'gpu'"),
    (["eval", "--model", "tiny", "--config", "TMP/typo.yaml"], "TMP/typo.yaml: unknown key(s) 'peple'"),
    (["eval", "--model", "tiny", "--out", "FILE"], "--out FILE is a file, not a folder"),
    (["eval", "--model", "tiny", "--task", "math", "--people", "3"], "people is a data setting the math task does"),
    (["eval", "--model", "tiny", "--out", "TMP/evaluated"], "TMP/evaluated/settings.json is empty or damaged"),
    (["data", "kk", "--out", "FILE"], "--out FILE is a file, not a folder"),
    (["data", "kk", "--out", "RO"], "--out RO: cannot write in RO"),
    (["data", "kk", "--depth", "30", "--out", "TMP/kk"], "depth must be a whole number from 1 to 8, got 30"),
    (["data", "kk", "--depth", "2000", "--out", "TMP/kk"], "depth must be a whole number from 1 to 8, got 2000"),
    (
        ["data", "kk", "--people", "2", "--train_puzzles", "100000", "--eval_puzzles", "5", "--out", "TMP/kk"],
        "found only 139 of",
    ),
    (["data", "math", "--train_puzzles", "-3", "--out", "TMP/math"], "train_puzzles must be ≥ 1, got -3"),
    (["compare", "--out", "FILE"], "--out FILE is a file, not a folder"),
    (["analyze", "--prompts", "abc"], "prompts must be a whole number, got 'abc'"),
    (["analyze", "--out", "FILE"], "--out FILE is a file, not a folder"),
    (["analyze", "--edges", "0,x,1"], "edges must be a number, got 'x'"),
    (["analyze", "--promts", "4"], "'promts' (did you mean prompts"),
    (["analyze", "--methods", "grpo,ar+stapp"], "methods: method 'ar+stapp': unknown part 'stapp'"),
    (["analyze", "--methods", "grpo,lopti_random"], "methods: lopti_random is a training control of `lopti compare`"),
    (["compare", "--variants", "grpo,grpo3"], "--variants: method 'grpo3': unknown part 'grpo3'; a method is one of"),
    (["compare", "--variants", "grpo2,lopti+grpo2"], "--variants: method 'lopti+grpo2': lopti and grpo2 each choose"),
    (["compare", "--seeds", "0,x"], "seeds must be a whole number, got 'x'"),
    (["compare", "--learning_rte", "0.1"], "'learning_rte' (did you mean learning_rate"),
    (["data", "kk", "--peple", "3", "--out", "TMP/kk"], "'peple' (did you mean people"),
    (["data", "math", "--out", "TMP/math", "stray"], "unexpected 'stray'; settings are given as --key value"),
]


@pytest.fixture
def workspace(tmp_path, monkeypatch, tiny_model_dir):
    """Return the replacements for FILE, RO and TMP; any model load or embedded build fails the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOPTI_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"tiny-base-v{embedded.BUILD_VERSION}").write_text("not a folder")
    (tmp_path / "file").write_text("a file")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "abc.yaml").write_text("learning_rate: abc\n")
    (tmp_path / "typo.yaml").write_text("peple: 3\nlearning_rate: 0.1\n")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    shutil.copytree(tiny_model_dir, tmp_path / "garbage")
    (tmp_path / "garbage" / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    (tmp_path / "evaluated").mkdir()
    (tmp_path / "evaluated" / "settings.json").write_text("")
    (tmp_path / "evaluated" / "records.jsonl").write_text('{"id": "kk-3p-test-00000"}\n')
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.geteuid() == 0:  # root ignores the mode; only an immutable folder refuses it
        subprocess.run(["chattr", "+i", str(read_only)], check=True)

    def built(*args, **kwargs):
        raise AssertionError("a model was built or loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", built)
    for name in embedded.BUILDERS:
        monkeypatch.setitem(embedded.BUILDERS, name, built)
    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    yield {"FILE": str(tmp_path / "file"), "RO": str(read_only), "TMP": str(tmp_path)}
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(read_only)], check=True)


def fill(words, places):
    for name, path in places.items():
        words = [word.replace(name, path) for word in words]
    return words


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("words", "message"), TRAIN, ids=[" ".join(w) for w, _ in TRAIN])
def test_bad_training_input_is_one_line_before_any_model(words, message, workspace, capsys):
    assert main(["train", *fill(words, workspace)]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: ") and fill([message], workspace)[0] in line


@pytest.mark.parametrize(("words", "message"), OTHERS, ids=[" ".join(w) for w, _ in OTHERS])
def test_bad_input_to_other_commands_is_one_line_before_any_model(words, message, workspace, capsys):
    assert main(fill(words, workspace)) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: ") and fill([message], workspace)[0] in line


def test_checking_the_output_folder_leaves_nothing_behind(workspace, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    # report_to is checked after the output folder, so these fail once it has been found writable
    assert main(["train", "--report_to", "wandb", "--output_dir", str(tmp_path / "new" / "run")]) == 2
    assert main(["train", "--report_to", "wandb"]) == 2  # default output_dir: runs/... in the working folder
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def fake_train(files: list[str], failure: BaseException):
    """Return a stand-in for lopti.commands.train_run.train that writes `files` in the run folder, then fails."""

    def train(settings):
        for order, name in enumerate(files, start=1):
            path = Path(settings["output_dir"]) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"global_step": 2}))
            os.utime(path, (time.time() + order, time.time() + order))  # written one after the other
        raise failure

    return train


@pytest.mark.parametrize("checkpoint", [True, False], ids=["after-a-checkpoint", "before-any"])
def test_ctrl_c_prints_how_to_continue(checkpoint, workspace, tmp_path, monkeypatch, capsys):
    from lopti.commands import train_run as run_module

    files = ["metrics.jsonl", *(["checkpoint-2/trainer_state.json"] if checkpoint else [])]
    monkeypatch.setattr(run_module, "train", fake_train(files, KeyboardInterrupt()))
    assert main(["train", "--output_dir", str(tmp_path / "my run")]) == 130
    line = one_error_line(capsys)
    if checkpoint:
        assert line == f"interrupted; continue with: lopti train --resume --output_dir '{tmp_path / 'my run'}'"
    else:
        assert "before the first checkpoint was saved; run the same command again" in line


def test_ctrl_c_in_a_distributed_launch_is_reported_by_rank_0_only(workspace, tmp_path, monkeypatch, capsys):
    from lopti.commands import train_run as run_module

    monkeypatch.setattr(run_module, "train", fake_train(["checkpoint-2/trainer_state.json"], KeyboardInterrupt()))
    lines = []
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        assert main(["train", "--output_dir", str(tmp_path / "run")]) == 130
        lines.append(capsys.readouterr().err.strip())
    assert lines[0].startswith("interrupted; continue with: lopti train --resume") and lines[1] == ""


def test_sigterm_ends_a_run_with_the_line_that_continues_it(workspace, tmp_path, monkeypatch, capsys):
    from lopti.commands import train_run as run_module

    def train(settings):
        (Path(settings["output_dir"]) / "checkpoint-2").mkdir(parents=True)
        (Path(settings["output_dir"]) / "checkpoint-2" / "trainer_state.json").write_text("{}")
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill`, a scheduler's cancel or a launcher sends
        time.sleep(5)  # the handler raises before this returns
        raise AssertionError("SIGTERM did not end the run")

    monkeypatch.setattr(run_module, "train", train)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["train", "--output_dir", str(tmp_path / "run")]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (
        one_error_line(capsys)
        == f"ended by SIGTERM; continue with: lopti train --resume --output_dir {tmp_path / 'run'}"
    )


def test_a_collective_failing_on_a_dead_process_is_one_line_from_the_survivor(workspace, tmp_path, monkeypatch,
                                                                               capsys):  # fmt: skip
    from lopti.commands import train_run as run_module

    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:19864: Connection reset by peer. "
                        "This is typically caused by a remote worker hanging")  # fmt: skip
    monkeypatch.setattr(run_module, "train", fake_train(["checkpoint-2/trainer_state.json"], gloo))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["train", "--output_dir", str(tmp_path / "run")]) == 1
    assert one_error_line(capsys) == (
        "stopped: another process of this distributed launch ended (Connection reset by peer); "
        f"continue with: lopti train --resume --output_dir {tmp_path / 'run'}"
    )
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: the same text is no news of a peer, and is not hidden
    with pytest.raises(RuntimeError, match="Connection reset by peer"):
        main(["train", "--output_dir", str(tmp_path / "run")])


def test_a_distributed_launch_needs_an_output_folder_all_processes_share(workspace, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train"]) == 2
    assert one_error_line(capsys) == (
        "error: set --output_dir in a distributed launch: each process would name its own timestamped folder"
    )


def test_full_disk_names_the_file_being_written(workspace, tmp_path, monkeypatch, capsys):
    from lopti.commands import train_run as run_module

    torch_failure = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    written = ["metrics.jsonl", "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt"]
    monkeypatch.setattr(run_module, "train", fake_train(written, torch_failure))
    monkeypatch.setattr(errors.shutil, "disk_usage", lambda path: SimpleNamespace(free=0))
    assert main(["train", "--output_dir", str(tmp_path / "run")]) == 1
    line = one_error_line(capsys)
    assert line == (
        f"error: no space left on device while writing {tmp_path / 'run' / 'checkpoint-2' / 'optimizer.pt'}; "
        "free some space, then run the command again"
    )


def test_torch_write_failure_with_space_left_is_not_called_a_full_disk(workspace, tmp_path, monkeypatch):
    from lopti.commands import train_run as run_module

    torch_failure = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    monkeypatch.setattr(run_module, "train", fake_train(["checkpoint-2/optimizer.pt"], torch_failure))
    monkeypatch.setattr(errors.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**12))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        main(["train", "--output_dir", str(tmp_path / "run")])


def test_enospc_without_a_file_name_names_the_partial_file(workspace, tmp_path, monkeypatch, capsys):
    import pyarrow.parquet

    def write_table(table, path):
        Path(path).write_bytes(b"PAR1")  # the file is created, then the disk fills up
        os.utime(path, (time.time() + 1, time.time() + 1))  # after train.jsonl even on a coarse clock
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pyarrow.parquet, "write_table", write_table)
    out = tmp_path / "kk"
    assert main(["data", "kk", "--people", "3", "--train_puzzles", "2", "--eval_puzzles", "2", "--out", str(out)]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: no space left on device while writing {out / 'train.parquet'};")


def test_disk_full_message_prefers_the_file_the_error_names(tmp_path):
    error = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "a.bin"))
    message = errors.disk_full_message(error, tmp_path, 0.0)
    assert message.startswith(f"no space left on device while writing {error.filename};")
    assert errors.disk_full_message(ValueError("unexpected pos"), tmp_path, 0.0) is None


def test_numerical_failure_in_training_is_not_called_a_user_mistake(workspace, tmp_path, monkeypatch, capsys):
    from lopti.commands import train_run as run_module

    failure = errors.NumericalFailure("optimizer step 3: old_logprobs has 2 non-finite value(s) in the loss")
    monkeypatch.setattr(run_module, "train", fake_train([], failure))
    assert main(["train", "--output_dir", str(tmp_path / "run")]) == 1
    assert one_error_line(capsys) == f"numerical failure: {failure}"
