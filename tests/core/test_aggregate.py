import pytest
import torch

from lopti.core import aggregate_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0], [99.0, 99.0, 99.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 10 / 4),
        ("seq-mean-token-mean", (2.0 + 4.0) / 2),
        ("seq-mean-token-sum", (6.0 + 4.0) / 2),
    ],
)
def test_hand_computed(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_dr_grpo_fixed_divisor():
    loss = aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", max_length=5)
    assert loss.item() == pytest.approx(10 / (3 * 5))


def test_gradient_ignores_padding():
    loss = LOSS.clone().requires_grad_()
    aggregate_loss(loss, MASK).backward()
    torch.testing.assert_close(loss.grad, MASK / 4.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_length must be a positive int"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="shorter than the responses"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", max_length=2)
    with pytest.raises(ValueError, match="mode must be one of"):
        aggregate_loss(LOSS, MASK, "sum")
    with pytest.raises(ValueError, match="selects no token"):
        aggregate_loss(LOSS, torch.zeros_like(MASK))


def test_token_mean_with_a_global_token_count():
    assert aggregate_loss(LOSS, MASK, num_tokens=8).item() == pytest.approx(10 / 8)
