"""Held-out answers' token probabilities: one padded forward per batch counts each answer's tokens per π bucket as
scoring each (prompt, answer) alone would, and the evaluation's records and summary carry the counts."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lopti.core.buckets import bucket_labels
from lopti.evaluation.scoring import evaluate_rows, token_shares
from lopti.evaluation.token_probabilities import answer_token_counts

EDGES = (0.0, 0.1, 0.3, 1.0)


def alone(model, tokenizer, prompt: str, answer: list[int], temperature: float) -> dict[str, int]:
    """Count one answer's tokens per bucket from the full logits of its own unpadded sequence."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + answer])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].double() / temperature
    probabilities = torch.softmax(logits, -1).gather(-1, torch.tensor(answer)[:, None]).squeeze(-1)
    index = torch.bucketize(probabilities, torch.tensor(EDGES[1:-1], dtype=torch.float64), right=True)
    return {label: int((index == k).sum()) for k, label in enumerate(bucket_labels(EDGES))}


@pytest.fixture(scope="module")
def peaked(peaked_model_dir):
    return AutoModelForCausalLM.from_pretrained(peaked_model_dir).eval(), AutoTokenizer.from_pretrained(
        peaked_model_dir
    )


def test_padded_batches_count_each_answer_as_scoring_it_alone_would(peaked):
    model, tokenizer = peaked
    prompts = ["A says B is a knave.", "B says", "Who is a knight? A says nothing at all and B"]
    generator = torch.Generator().manual_seed(0)
    answers = [torch.randint(5, tokenizer.vocab_size, (n,), generator=generator).tolist() for n in (7, 1, 12)]
    answers += [[]]  # an answer cut to nothing counts nothing
    prompts += ["C says"]
    counts = answer_token_counts(model, tokenizer, prompts, answers, temperature=0.7, edges=EDGES, batch_size=3)
    for prompt, answer, counted in zip(prompts, answers, counts, strict=True):
        assert counted == (alone(model, tokenizer, prompt, answer, 0.7) if answer else dict.fromkeys(counted, 0))
        assert sum(counted.values()) == len(answer)
    assert len({tuple(c.values()) for c in counts[:3]}) > 1, "the answers should fall in different buckets"


def test_the_sampled_evaluation_records_each_answers_counts_and_the_shares(peaked, monkeypatch):
    model, tokenizer = peaked
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    rows = [{"id": i, "prompt": p, "people": 2} for i, p in enumerate(["A says B lies.", "B says A lies too."])]

    def count(prompts, answers):
        return answer_token_counts(model, tokenizer, prompts, answers, temperature=1.0, edges=EDGES)

    result = evaluate_rows(
        model, tokenizer, rows, lambda text, row: (False, True), "people", samples=2, temperature=1.0,
        max_new_tokens=6, count_tokens=count,
    )  # fmt: skip
    records = result["records"]
    assert [len(r["token_buckets"]) for r in records] == [2, 2]
    assert [sum(c.values()) for r in records for c in r["token_buckets"]] == [n for r in records for n in r["length"]]
    shares = result["token_probability_shares"]
    assert list(shares) == bucket_labels(EDGES) and sum(shares.values()) == pytest.approx(1.0)
    assert token_shares([{"correct": [True]}]) is None  # records without counts: no shares
