"""Rollouts for the probe: G sampled responses per prompt with their rewards, as token ids.

They can be saved and reloaded (rollouts.jsonl), so one batch can be analysed again under other settings.
The file records the tokenizer it was made with; loading it for a model with another tokenizer is an
error that says so, instead of a probe of meaningless ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lopti.evaluation.generation import generate, prompt_text
from lopti.tasks.registry import get_task


@dataclass
class Rollouts:
    """Responses in groups of `num_generations` consecutive rows (one prompt per group)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    rewards: list[float]
    num_generations: int
    temperature: float

    def __len__(self) -> int:
        return len(self.rewards)


def tokenizer_fingerprint(tokenizer) -> dict[str, Any]:
    """Return the vocabulary size and a hash of the token → id map: equal only for the same tokenizer."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]
    return {"vocab_size": len(tokenizer), "vocab_sha256": digest}


def collect_rollouts(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    task: str,
    reward: str,
    num_generations: int,
    temperature: float,
    max_completion_length: int,
    seed: int = 0,
) -> Rollouts:
    """Sample `num_generations` responses per row and score them with the task's reward `reward`."""
    if num_generations < 2:
        raise ValueError(f"num_generations must be at least 2 (advantages compare responses), got {num_generations}")
    if temperature <= 0:
        raise ValueError(f"temperature must be above 0 for a rollout, got {temperature}")
    texts = [prompt_text(r["prompt"], tokenizer) for r in rows]
    outputs = generate(model, tokenizer, texts, num_generations, temperature, max_completion_length, seed=seed)
    reward_fn = get_task(task).make_reward(reward, tokenizer.eos_token_id, tokenizer.pad_token_id)
    columns = {key: [row[key] for row in rows for _ in range(num_generations)] for key in rows[0] if key != "prompt"}
    prompts = [row["prompt"] for row in rows for _ in range(num_generations)]
    completions = [text for group in outputs for text, _ in group]
    ids = [list(i) for group in outputs for _, i in group]
    rewards = reward_fn(prompts, completions, completion_ids=ids, **columns)
    prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(num_generations)]
    return Rollouts(prompt_ids, ids, [float(r) for r in rewards], num_generations, temperature)


def save_rollouts(rollouts: Rollouts, tokenizer, path: Path) -> None:
    """Write a header line (tokenizer, num_generations, temperature) and one line per response."""
    header = {"tokenizer": tokenizer_fingerprint(tokenizer), "num_generations": rollouts.num_generations}
    header["temperature"] = rollouts.temperature
    lines = [json.dumps(header)]
    for index in range(len(rollouts)):
        line = {"prompt_ids": rollouts.prompt_ids[index], "completion_ids": rollouts.completion_ids[index]}
        lines.append(json.dumps({**line, "reward": rollouts.rewards[index]}))
    path.write_text("\n".join(lines) + "\n")


def load_rollouts(path: str | Path, tokenizer) -> Rollouts:
    """Return the rollouts in `path`, checking they were made with `tokenizer`; errors name file and row."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no rollouts file at {path}")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        header, rows = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
        # the files in results/analysis/ name the group size group_size
        made_with, num_generations = header["tokenizer"], int(header.get("num_generations", header.get("group_size")))
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a lopti rollouts file ({error})") from None
    ours = tokenizer_fingerprint(tokenizer)
    if made_with != ours:
        raise ValueError(
            f"{path} was made with another tokenizer (vocab {made_with.get('vocab_size')}, hash "
            f"{made_with.get('vocab_sha256')}) than this model's (vocab {ours['vocab_size']}, hash "
            f"{ours['vocab_sha256']}); roll out again with this model"
        )
    if not rows or len(rows) % num_generations:
        raise ValueError(f"{path}: {len(rows)} responses do not fill groups of {num_generations}")
    for number, row in enumerate(rows, start=2):
        ids = row.get("prompt_ids", []) + row.get("completion_ids", [])
        if not row.get("completion_ids") or any(not 0 <= i < ours["vocab_size"] for i in ids):
            raise ValueError(f"{path}, line {number}: empty completion or token ids outside the vocabulary")
    return Rollouts(
        [r["prompt_ids"] for r in rows],
        [r["completion_ids"] for r in rows],
        [float(r["reward"]) for r in rows],
        num_generations,
        float(header.get("temperature", 1.0)),
    )


def split_groups(rollouts: Rollouts, groups_per_batch: int, batches: int, source: str) -> list[Rollouts]:
    """Return the first `batches` batches of `groups_per_batch` consecutive groups each; `source` names the file."""
    size = groups_per_batch * rollouts.num_generations
    if len(rollouts) < size * batches:
        raise ValueError(
            f"{source} holds {len(rollouts) // rollouts.num_generations} groups, but {batches} batches (warm-up ones "
            f"included) of {groups_per_batch} prompts need {groups_per_batch * batches}"
        )
    return [
        Rollouts(
            rollouts.prompt_ids[k * size : (k + 1) * size],
            rollouts.completion_ids[k * size : (k + 1) * size],
            rollouts.rewards[k * size : (k + 1) * size],
            rollouts.num_generations,
            rollouts.temperature,
        )
        for k in range(batches)
    ]
