"""How the CPU fast path's sampling loop draws a token from each row's probabilities (lopti/cpu/decode.py).

`draw_like_multinomial` consumes the random numbers `torch.multinomial` consumes, so the loop samples generate's
tokens for the same seed; `draw_by_inverse_cdf` samples the same distribution from one uniform number per row.
"""

from __future__ import annotations

import functools

import torch


def draw_like_multinomial(probs: torch.Tensor, rows: torch.Tensor, all_rows: int) -> torch.Tensor:
    """Return the tokens `torch.multinomial(p, 1)` samples for the rows `rows` of an (`all_rows`, vocabulary) tensor
    p, given their probabilities `probs`: argmax(p / q) per row, with the Exp(1) noise q drawn for all the rows of p
    as multinomial draws it, so the random numbers consumed are the same."""
    noise = torch.empty((all_rows, probs.size(-1)), dtype=probs.dtype, device=probs.device).exponential_()
    return (probs / noise[rows]).argmax(dim=-1)


def draw_by_inverse_cdf(probs: torch.Tensor) -> torch.Tensor:
    """Return one token per row of `probs` (rows, vocabulary), sampled with one uniform number per row: the first
    token whose cumulative probability exceeds it. The distribution is multinomial's, at a fraction of its cost:
    multinomial draws an Exp(1) number for every entry of the vocabulary, of every row, at every step."""
    cumulative = probs.cumsum(dim=-1)
    uniform = torch.rand(len(probs), 1, dtype=cumulative.dtype, device=cumulative.device) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, uniform, right=True).clamp(max=probs.size(-1) - 1).squeeze(-1)


@functools.cache
def draws_like_multinomial() -> bool:
    """Return True if this torch's `multinomial` draws one sample per row as `draw_like_multinomial` does."""
    probs = torch.rand(8, 50, generator=torch.Generator().manual_seed(0)).softmax(dim=-1)
    state = torch.get_rng_state()
    try:
        expected = torch.multinomial(probs, num_samples=1).squeeze(1)
        torch.set_rng_state(state)
        ours = draw_like_multinomial(probs, torch.arange(8), 8)
    finally:
        torch.set_rng_state(state)
    return torch.equal(ours, expected)
