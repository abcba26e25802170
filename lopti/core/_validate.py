"""Argument checks shared by the core functions: each raises a ValueError naming the argument."""

from __future__ import annotations

import torch


class NonFiniteError(ValueError):
    """A tensor holds NaN or inf (raised by `check_finite`); callers that know where the numbers came from, such as
    a trainer, report it as a numerical failure rather than as a bad argument."""


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise unless every named tensor has the same shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listed}")


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise if `tensor` holds NaN or inf, saying how many and where the first one is."""
    bad = ~torch.isfinite(tensor)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise NonFiniteError(f"{name} has {int(bad.sum())} non-finite value(s), first at index {first}")


def check_unit_interval(name: str, value: float, *, open_low: bool = False, open_high: bool = False) -> None:
    """Raise unless 0 ≤ value ≤ 1 (with the chosen ends open)."""
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value < 1 if open_high else value <= 1
    if not (low_ok and high_ok):
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def check_mask(name: str, mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return `mask` as a bool tensor after checking its shape and that it selects something."""
    check_same_shape(**{name: mask, "values": like})
    mask = mask.bool()
    if not mask.any():
        raise ValueError(f"{name} selects no token (all padding)")
    return mask


def check_group_size(batch_size: int, group_size: int) -> None:
    """Raise unless `group_size` is positive and divides `batch_size`."""
    if group_size < 1 or batch_size % group_size != 0:
        raise ValueError(f"group_size={group_size} does not divide the batch of {batch_size} responses")
