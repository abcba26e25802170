"""The warm start's SFT data: solutions, or the imperfect teacher's credulous guesses."""

import pytest

from lopti.models.warmstart import WarmStartConfig, sft_dataset
from lopti.tasks.kk.data import kk_records
from lopti.tasks.kk.rewards import accuracy


def _answers(completion: str) -> str:
    return completion.split("<answer>\n", 1)[1].split("\n</answer>", 1)[0]


def test_a_perfect_teacher_labels_every_puzzle_with_its_solution():
    config = WarmStartConfig(puzzles_per_size=40, guess_share=0.0)
    records = kk_records(config.people, train=40, test=0, seed=config.seed, template="terse", fixed_names=True)
    solutions = {r["prompt"][-1]["content"]: r["solution_text"] for r in records["train"]}
    rows = sft_dataset(config)
    assert len(rows) == len(solutions) == 80
    for row in rows:
        assert row["completion"] == f"</think>\n<answer>\n{solutions[row['prompt']]}\n</answer>"


def test_guess_share_labels_that_share_of_puzzles_everyone_a_knight():
    config = WarmStartConfig(puzzles_per_size=500, guess_share=0.4)
    solved = sft_dataset(WarmStartConfig(puzzles_per_size=500, guess_share=0.0))
    mixed = sft_dataset(config)
    by_prompt = {row["prompt"]: row["completion"] for row in solved}
    guessed = [row for row in mixed if row["completion"] != by_prompt[row["prompt"]]]
    assert 0.33 < len(guessed) / len(mixed) < 0.47  # 1000 draws: 0.4 within ~4.5 standard deviations
    for row in guessed:
        lines = _answers(row["completion"]).splitlines()
        assert all(line.endswith(" is a knight") for line in lines)
        solution_lines = _answers(by_prompt[row["prompt"]]).splitlines()
        assert [line.split(" ")[1] for line in lines] == [line.split(" ")[1] for line in solution_lines]
    assert sft_dataset(config)["completion"] == mixed["completion"]  # deterministic


def test_the_reward_scores_a_label_right_iff_it_is_the_solution():
    rows = sft_dataset(WarmStartConfig(puzzles_per_size=50, guess_share=0.5))
    perfect = sft_dataset(WarmStartConfig(puzzles_per_size=50, guess_share=0.0))
    solved = {row["prompt"]: row["completion"] for row in perfect}
    for row in rows:
        names = [line.split(" ")[1] for line in _answers(solved[row["prompt"]]).splitlines()]
        truth = ["knight" in line.split(" is a ")[1] for line in _answers(solved[row["prompt"]]).splitlines()]
        text = "<think>" + row["completion"]  # the prompt pre-fills "<think>"
        assert accuracy(text, names, truth) == float(row["completion"] == solved[row["prompt"]])


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_guess_share_outside_zero_one_is_refused(share):
    with pytest.raises(ValueError, match="guess_share"):
        sft_dataset(WarmStartConfig(puzzles_per_size=5, guess_share=share))
