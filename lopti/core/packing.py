"""The packed layout of a generated batch: each distinct prompt once, followed by all its completions.

A generated batch holds every prompt once per sampled completion, so a forward over its rows runs most prompt
tokens many times. Packed, each distinct prompt is one row followed by its completions: a 4D attention mask
lets a completion see the prompt and its own earlier tokens only, and its position ids continue from the
prompt's. Each completion token's log-prob is then the same function of the weights as in the padded batch
(RoPE depends on relative positions only, and left padding only shifts them), and the gradient reaching the
shared prompt is the sum of what its copies would get; only float rounding differs. The prompt's last token is
repeated at the head of each completion's segment, because its hidden state predicts the completion's first
token. Pure tensor layout, no model: the trainer's CPU fast path (lopti/cpu/packing.py) and the one-update
probe (lopti/diagnostics/probe.py) both run their forwards on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORED = -100  # the label the fused LM head skips


@dataclass
class PackedRows:
    """A batch of (prompt, completion) rows packed as one row per distinct prompt.

    `sources` index the packed rows' flattened positions, `targets` the matching flattened (row, completion
    position) of the original batch: the log-prob computed at `sources[i]` belongs at `targets[i]`.
    """

    input_ids: torch.Tensor  # (S, L)
    attention_mask: torch.Tensor  # (S, 1, L, L) bool, True = attend
    position_ids: torch.Tensor  # (S, L)
    shift_labels: torch.Tensor  # (S, L): the token each position predicts, IGNORED where none
    sources: torch.Tensor  # (N,)
    targets: torch.Tensor  # (N,)
    row_groups: torch.Tensor  # (B,): the packed row that holds each original row's completion


def _is_suffix_mask(mask: torch.Tensor) -> bool:
    """Return True if every row of the 0/1 `mask` is zeros followed by ones (left padding)."""
    return bool((mask[:, 1:] >= mask[:, :-1]).all())


def pack_shared_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_length: int, pad_token_id: int
) -> PackedRows | None:
    """Return the rows packed one per distinct prompt, or None when that saves nothing or cannot be done.

    `input_ids` are left-padded prompts followed by right-padded completions (TRL's layout), the last
    `completion_length` columns being the completions. Packing needs left-padded prompts whose last column is
    a real token and completions whose real tokens come first; any other layout returns None.
    """
    prompt_mask, completion_mask = attention_mask[:, :-completion_length], attention_mask[:, -completion_length:]
    if prompt_mask.size(1) == 0 or not _is_suffix_mask(prompt_mask) or not bool(prompt_mask[:, -1].all()):
        return None
    if not _is_suffix_mask(completion_mask.flip(1)):
        return None
    prompts = input_ids[:, :-completion_length].masked_fill(prompt_mask == 0, -1)
    distinct, group_of_row = torch.unique(prompts, dim=0, return_inverse=True)
    if len(distinct) == len(input_ids):
        return None  # no prompt repeats: the padded batch is as small
    completion_lengths = completion_mask.sum(dim=1).tolist()
    prompt_lengths = prompt_mask.sum(dim=1).tolist()
    width = input_ids.size(1)
    sequences, sources, targets = [], [], []
    for group in range(len(distinct)):
        rows = (group_of_row == group).nonzero().flatten().tolist()
        prompt = input_ids[rows[0], width - completion_length - prompt_lengths[rows[0]] : width - completion_length]
        tokens, positions, labels, segment = [prompt[:-1]], [torch.arange(len(prompt) - 1)], [], [0] * (len(prompt) - 1)
        labels.append(torch.full((len(prompt) - 1,), IGNORED))
        for index, row in enumerate(rows, start=1):
            length = completion_lengths[row]
            if length == 0:
                continue
            completion = input_ids[row, width - completion_length : width - completion_length + length]
            start = len(segment)
            tokens.append(torch.cat([prompt[-1:], completion[:-1]]))
            positions.append(torch.arange(len(prompt) - 1, len(prompt) - 1 + length))
            labels.append(completion)
            segment += [index] * length
            sources.append((len(sequences), start, length))
            targets.append((row, length))
        sequences.append((torch.cat(tokens), torch.cat(positions), torch.cat(labels), torch.tensor(segment)))
    packed_length = max(len(tokens) for tokens, *_ in sequences)
    count = len(sequences)
    device = input_ids.device
    packed_ids = torch.full((count, packed_length), pad_token_id, dtype=input_ids.dtype)
    position_ids = torch.zeros((count, packed_length), dtype=torch.long)
    shift_labels = torch.full((count, packed_length), IGNORED, dtype=input_ids.dtype)
    segments = torch.full((count, packed_length), -1, dtype=torch.long)
    for index, (tokens, positions, labels, segment) in enumerate(sequences):
        packed_ids[index, : len(tokens)] = tokens
        position_ids[index, : len(tokens)] = positions
        shift_labels[index, : len(tokens)] = labels
        segments[index, : len(tokens)] = segment
    query, key = segments[:, :, None], segments[:, None, :]
    causal = torch.ones(packed_length, packed_length, dtype=torch.bool).tril()
    visible = causal & (query >= 0) & ((key == 0) | (key == query))
    visible |= torch.eye(packed_length, dtype=torch.bool)  # a padding position sees itself: no empty softmax row
    source_index = torch.cat([torch.arange(s * packed_length + a, s * packed_length + a + n) for s, a, n in sources])
    target_index = torch.cat([torch.arange(r * completion_length, r * completion_length + n) for r, n in targets])
    return PackedRows(
        input_ids=packed_ids.to(device),
        attention_mask=visible[:, None].to(device),
        position_ids=position_ids.to(device),
        shift_labels=shift_labels.to(device),
        sources=source_index.to(device),
        targets=target_index.to(device),
        row_groups=group_of_row.to(device),
    )


def unpack(values: torch.Tensor | None, packed: PackedRows, rows: int, completion_length: int) -> torch.Tensor | None:
    """Return per-token `values` of the packed rows laid out as the original (rows, completion_length), 0 elsewhere."""
    if values is None:
        return None
    picked = values.reshape(-1).index_select(0, packed.sources)
    return (
        values.new_zeros(rows * completion_length).index_copy(0, packed.targets, picked).view(rows, completion_length)
    )
