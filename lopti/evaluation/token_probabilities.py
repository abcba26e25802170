"""How probable a model finds the tokens of its own held-out answers: the count of each answer's tokens per
probability bucket (docs/paper.md §3's picture of where the low-probability tokens are).

π is the probability the token was sampled with, softmax(logits / T) at the evaluation's temperature — the π of
the trainer's `probs/share_*` metrics, which TRL computes at the rollout temperature. One forward pass over the
prompts and answers gives it: no decoding again. A study of AR's strength reads these counts after RL beside
before, to see whether the reweighting changed which tokens the policy is unsure of.
"""

from __future__ import annotations

import torch

from lopti.core.buckets import QUARTILES, bucket_labels, bucket_totals, probability_buckets


@torch.no_grad()
def answer_token_counts(
    model,
    tokenizer,
    prompts: list[str],
    answers: list[list[int]],
    temperature: float,
    edges: tuple[float, ...] | list[float] = QUARTILES,
    batch_size: int = 8,
) -> list[dict[str, int]]:
    """Return, per (prompt text, answer ids) pair, the number of the answer's tokens in each π bucket, by the
    bucket's label ("[0.00,0.25)").

    Rows are laid out as [padding, prompt, answer, padding], so that the last logits of every row cover every
    answer, and only those logits are computed (`logits_to_keep`): a vocabulary of 49k × 8 rows × 129 positions in
    float32 is 200 MB. An empty answer counts nothing.
    """
    labels = bucket_labels(edges)
    counts: list[dict[str, int]] = []
    for start in range(0, len(prompts), batch_size):
        prompt_ids = [
            tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts[start : start + batch_size]
        ]
        answer_ids = answers[start : start + batch_size]
        longest_prompt, longest_answer = max(map(len, prompt_ids)), max(map(len, answer_ids), default=0)
        if longest_answer == 0:
            counts += [dict.fromkeys(labels, 0) for _ in answer_ids]
            continue
        pad = tokenizer.pad_token_id
        ids, mask, answer_mask = [], [], []
        for prompt, answer in zip(prompt_ids, answer_ids, strict=True):
            left, right = longest_prompt - len(prompt), longest_answer - len(answer)
            ids.append([pad] * left + prompt + answer + [pad] * right)
            mask.append([0] * left + [1] * (len(prompt) + len(answer)) + [0] * right)
            answer_mask.append([1] * len(answer) + [0] * right)
        ids_t, mask_t = torch.tensor(ids, device=model.device), torch.tensor(mask, device=model.device)
        positions = (mask_t.cumsum(-1) - 1).clamp(min=0)
        logits = model(
            input_ids=ids_t, attention_mask=mask_t, position_ids=positions, logits_to_keep=longest_answer + 1
        ).logits[:, :-1]  # the logits that predict each answer position
        tokens = ids_t[:, -longest_answer:]
        logps = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        index = probability_buckets(logps, torch.tensor(answer_mask, device=model.device).bool(), edges)
        counts += [dict(zip(labels, bucket_totals(row, len(labels)).long().tolist(), strict=True)) for row in index]
    return counts
