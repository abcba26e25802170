"""Held-out decoding's progress: `AnswersEnded` counts each answer once, as it ends or at the end of its batch."""

import types

import torch

from lopti.evaluation.generation import AnswersEnded


def test_each_answer_counts_once_when_it_ends_and_the_cut_ones_at_the_end():
    updates = []
    bar = types.SimpleNamespace(update=updates.append)
    streamer = AnswersEnded(bar, types.SimpleNamespace(eos_token_id=2))
    streamer.put(torch.tensor([[5, 6], [5, 7], [5, 8], [5, 9]]))  # the prompts
    streamer.put(torch.tensor([4, 2, 4, 4]))  # row 1 ends
    streamer.put(torch.tensor([2, 2, 4, 4]))  # row 0 ends; row 1's padding is its end token again
    streamer.end()  # rows 2 and 3 ran to the budget
    assert updates == [1, 1, 2]
