import json

import pyarrow.parquet as pq
import pytest

from lopti.cli import main
from lopti.tasks.kk.data import kk_dataset, kk_records, parse_people
from lopti.tasks.kk.logic import solve
from lopti.tasks.kk.rewards import logic_rl_score, make_reward

FIELDS = {"id", "people", "names", "statements", "solution", "solution_text", "quiz", "prompt", "data_source"}


def test_parse_people():
    assert parse_people("3-7") == [3, 4, 5, 6, 7]
    assert parse_people("2,4,6") == [2, 4, 6]
    assert parse_people(5) == [5]
    for bad, message in [("1-3", "from 2 to 12, got 1"), ("x", "must look like"), ("13", "got 13")]:
        with pytest.raises(ValueError, match=message):
            parse_people(bad)


def test_records_schema_and_content():
    records = kk_records("3-4", train=20, test=5, seed=2)
    assert [len(records[s]) for s in ("train", "test")] == [40, 10]
    for row in records["train"] + records["test"]:
        assert row.keys() >= FIELDS
        assert solve(row["statements"]) == [row["solution"]]
        assert row["data_source"] == f"kk_logic{row['people']}"
        assert row["reward_model"]["ground_truth"]["solution_text_format"] == row["solution_text"]
        assert row["prompt"][0]["role"] == "user" and row["quiz"] in row["prompt"][0]["content"]
        # the ground truth scores 3 with the paper's reward
        answer = f"<think>ok</think><answer>{row['solution_text']}</answer>"
        assert logic_rl_score(answer, row["names"], row["solution"]) == 3.0
    ids = [row["id"] for rows in records.values() for row in rows]
    assert len(ids) == len(set(ids))


def test_dataset_dict_feeds_trl_rewards():
    dataset = kk_dataset(people="3", train=4, test=2, seed=0, template="chat")
    assert set(dataset) == {"train", "test"}
    row = dataset["test"][0]
    assert json.loads(row["statements"]) == kk_records("3", 4, 2, 0, "chat")["test"][0]["statements"]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    completion = f"<think>x</think><answer>{row['solution_text']}</answer>"
    reward = make_reward("strict")
    assert reward(
        prompts=[row["prompt"]], completions=[completion], names=[row["names"]], solution=[row["solution"]]
    ) == [3.0]


def test_cli_writes_identical_files_for_identical_arguments(tmp_path):
    args = ["data", "kk", "--people", "3-4", "--train_puzzles", "30", "--eval_puzzles", "10", "--data_seed", "5"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    for name in ("train.jsonl", "test.jsonl", "train.parquet", "test.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    rows = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and isinstance(rows[0]["statements"], list)
    table = pq.read_table(tmp_path / "a" / "test.parquet")
    assert table.num_rows == 20 and "reward_model" in table.column_names


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    assert main(["data", "kk", "--people", "1-3", "--out", str(tmp_path)]) == 2
    assert main(["data", "kk", "--people", "2", "--train_puzzles", "900", "--out", str(tmp_path)]) == 2
    assert main(["data", "kk", "--template", "fancy", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert "people must be from 2 to 12" in lines[0]
    assert "found only" in lines[1] and "2-person" in lines[1]
    assert "unknown template 'fancy'" in lines[2]


def test_fixed_names_give_person_k_the_kth_name():
    rows = kk_records("3-4", train=5, test=2, seed=0, template="terse", fixed_names=True)["train"]
    for row in rows:
        assert row["names"] == ["Aaron", "Abigail", "Adam", "Alice"][: row["people"]]
        assert row["prompt"][0]["content"].count("\n(") == row["people"]


def test_lopti_data_under_the_task_data_keys_writes_the_puzzles_lopti_train_generates(tmp_path):
    from lopti.tasks.registry import get_task

    keys = {"people": "3-4", "train_puzzles": 5, "eval_puzzles": 2, "data_seed": 7}
    words = [word for key, value in keys.items() for word in (f"--{key}", str(value))]
    assert main(["data", "kk", *words, "--out", str(tmp_path)]) == 0
    train, held_out = get_task("kk").rows(get_task("kk").own_data(keys))
    for split, rows in (("train", train), ("test", held_out)):
        written = [json.loads(line) for line in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        assert [(r["id"], r["solution"]) for r in written] == [(r["id"], r["solution"]) for r in rows]
