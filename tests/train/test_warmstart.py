"""The warm start's SFT data: every answer is the solution; a share of completions reason first."""

import pytest

from lopti.models.warmstart import WarmStartConfig, sft_dataset
from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.rewards import accuracy, logic_rl_score


def _answers(completion: str) -> str:
    return completion.split("<answer>\n", 1)[1].split("\n</answer>", 1)[0]


def test_every_completion_answers_with_the_solution_and_the_trace_share_reasons_first():
    config = WarmStartConfig(puzzles_per_size=600, trace_share=0.4)
    records = kk_records(config.people, train=600, test=0, seed=config.seed, template="terse", fixed_names=True)
    by_prompt = {r["prompt"][-1]["content"]: r for r in records["train"]}
    rows = sft_dataset(config)
    assert len(rows) == len(by_prompt) == 600
    traced = 0
    for row in rows:
        record = by_prompt[row["prompt"]]
        worked, _, answer = row["completion"].partition("</think>")
        assert answer == f"\n<answer>\n{record['solution_text']}\n</answer>"
        if worked:
            traced += 1
            last_try = [line for line in worked.splitlines() if line and line.split(" ")[0].isalpha()][-4:]
            assert last_try[0].split(" ")[1] == "".join("K" if k else "N" for k in record["solution"])
        text = "<think>" + row["completion"]  # the prompt pre-fills "<think>"
        assert accuracy(text, record["names"], record["solution"]) == 1.0
        assert logic_rl_score(text, record["names"], record["solution"]) == 3.0  # the paper's full reward
    assert 0.33 < traced / len(rows) < 0.47  # 600 draws of 0.4: within ~3.5 standard deviations
    assert sft_dataset(config)["completion"] == rows["completion"]  # deterministic


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_trace_share_at_its_ends_gives_one_kind_of_completion(share):
    rows = sft_dataset(WarmStartConfig(puzzles_per_size=30, trace_share=share))
    assert {row["completion"].startswith("</think>") for row in rows} == {share == 0.0}


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_trace_share_outside_zero_one_is_refused(share):
    with pytest.raises(ValueError, match="warm start trace_share must be in"):
        sft_dataset(WarmStartConfig(puzzles_per_size=5, trace_share=share))
