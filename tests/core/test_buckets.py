"""Probability buckets: edges, padding, shares."""

import math

import pytest
import torch

from lopti.core.buckets import QUARTILES, bucket_labels, bucket_shares, check_edges, probability_buckets
from lopti.core.isolation import low_prob_mask


def test_quartile_assignment_with_edges_and_padding():
    probs = torch.tensor([[0.1, 0.25, 0.5, 0.74, 0.75, 1.0], [0.3, 0.9, 0.2, 0.2, 0.2, 0.2]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    index = probability_buckets(probs.log(), mask)
    assert index.tolist() == [[0, 1, 2, 2, 3, 3], [1, 3, -1, -1, -1, -1]]
    lopti_low = low_prob_mask(probs.log(), mask, eta=0.5)
    assert torch.equal(lopti_low, (index >= 0) & (index < 2))  # the 0.5 edge splits exactly as Lopti does


def test_shares_sum_to_one_and_weighted_shares():
    index = torch.tensor([[0, 0, 3, -1], [1, 3, 3, 3]])
    shares = bucket_shares(index, 4)
    assert shares.tolist() == pytest.approx([2 / 7, 1 / 7, 0.0, 4 / 7]) and math.isclose(shares.sum().item(), 1.0)
    weights = torch.tensor([[1.0, 1.0, 0.5, 100.0], [2.0, 0.5, 0.5, 0.5]])
    assert bucket_shares(index, 4, weights).tolist() == pytest.approx([2 / 6, 2 / 6, 0.0, 2 / 6])
    assert bucket_shares(torch.full((2, 2), -1), 4).tolist() == [0.0] * 4


def test_edges_are_checked_and_labelled():
    assert bucket_labels(QUARTILES) == ["[0.00,0.25)", "[0.25,0.50)", "[0.50,0.75)", "[0.75,1.00]"]
    assert check_edges([0, 0.5, 1]) == (0.0, 0.5, 1.0)
    for bad in ([0.1, 1], [0, 0.5, 0.5, 1], [0, 1.2], [0]):
        with pytest.raises(ValueError, match="bucket edges must rise strictly from 0 to 1"):
            check_edges(bad)
