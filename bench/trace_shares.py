"""Quartile shares of a trace form's tokens under the teacher: the exact probability of each completion token.

A model that learned the warm start's teacher exactly would give each token of a stage-1 completion the
teacher's conditional probability given the tokens before it. This script draws --puzzles stage-1 completions
(3 people, terse prompts, fixed names, as `lopti.tasks.kk.warmstart.stage_records` builds them) in the given
trace form, ending in the tokenizer's end token as a sampled response does, and prints the shares of tokens
whose probability falls in [0, .25), [.25, .5), [.5, .75), [.75, 1] (docs/paper.md §9's quartiles), the mean
and longest completion length in tokens.

How the probabilities are exact. The renderer gets a `ScriptedRandom`, which records every draw it makes
(uniform ones: `choice`, `randrange`; weighted ones: `choices`) with its alternatives' probabilities, and can
replay a script of picks. For draw j of the sampled completion and each alternative a it did not take, the
completion is rendered again with every other draw replayed: a fork, which first differs from the sample at
token d(j, a), where the text spells a instead of the sample's pick c_j. A completion agrees with the sample's
first i tokens when each of its draws does, so, the draws being independent,

    P(token i | tokens < i) = Π_j (p_j(c_j) + Σ_{a: d(j,a) > i} p_j(a)) / (p_j(c_j) + Σ_{a: d(j,a) ≥ i} p_j(a)):

each draw keeps, of its probability still agreeing before token i, the part that still agrees after it. A
token where no fork differs has probability 1 (the form fixes it); a one-token choice among k equal
alternatives gives its token 1/k; alternatives that share their first tokens split their probability along
the tokens that tell them apart. This holds when no draw's alternatives or probabilities depend on a
draw written after it (the plain form writes the first try's synonym before the start of the search it drew
first; the two are independent) and each alternative is spelled where its draw is written, whatever the other
draws: both forms write every choice as whole words. `tests/tasks/kk/test_trace_shares.py` checks the
formula against an enumeration of every completion on small forms.

The shares are those of the sampled tokens, pooled over the puzzles: sampling the teacher, their expectation
is the share that RL's first batches would see from a model that learned it exactly; ± is the standard error
over puzzles. The shipped warm start, trained on the plain form, is as sharp as its teacher on the synonyms
(11.0% of its sampled tokens below .25, the teacher 10.7%) but less sharp on the tokens the form fixes: 6.4%
of the teacher's top-quartile tokens fall lower, 2.7 and 2.8 points into the middle quartiles. The calibrated
row moves that fraction of a form's top quartile down in those proportions: what a model trained as the
shipped one would sample.

Run (about a minute for 500 puzzles on an idle core; --stage-one-lengths adds half a minute):
  OMP_NUM_THREADS=1 python bench/trace_shares.py --form varied --puzzles 500 --stage-one-lengths
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

from lopti.models.embedded import SHIPPED
from lopti.tasks.kk.trace import FORMS
from lopti.tasks.kk.warmstart import WarmStartConfig, completion, stage_records

EDGES = (0.25, 0.5, 0.75)
MEASURED_PLAIN = (11.0, 2.7, 2.8, 83.6)  # docs/results.md, round 5: the shipped warm start's first RL batches
TEACHER_PLAIN = (10.7, 0.0, 0.0, 89.3)  # this script: --form plain --puzzles 500
PAPER = (19.2, 10.2, 10.1, 60.5)  # the paper's Fig. 1


class ScriptedRandom(random.Random):
    """A Random whose draws are `script`'s picks (where the script has one that fits) or else come from `seed`;
    `draws` records each as (its alternatives' probabilities, the index taken). Only draws it sees are allowed."""

    def __init__(self, script: list[int], seed: str):
        self.script, self.draws, self.source = list(script), [], random.Random(seed)
        super().__init__(0)

    def _take(self, probabilities: list[float], draw: Callable[[], int]) -> int:
        scripted = len(self.draws) < len(self.script) and self.script[len(self.draws)] < len(probabilities)
        index = self.script[len(self.draws)] if scripted else draw()
        self.draws.append((probabilities, index))
        return index

    def _randbelow(self, n: int) -> int:  # choice, randrange and shuffle draw through here
        return self._take([1 / n] * n, lambda: self.source.randrange(n))

    def choices(self, population, weights=None, *, cum_weights=None, k=1):
        if weights is None or cum_weights is not None or k != 1:
            raise ValueError("ScriptedRandom sees only choices(population, weights) with k = 1")
        probabilities = [w / sum(weights) for w in weights]
        return [population[self._take(probabilities, lambda: self.source.choices(range(len(weights)), weights)[0])]]

    def random(self) -> float:
        raise ValueError("a renderer drew random() directly: ScriptedRandom cannot see that choice")


def bucket(probability: float) -> int:
    """Return the quartile index of a probability: 0 for [0, .25) … 3 for [.75, 1]."""
    return sum(probability >= edge for edge in EDGES)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Return the first index where two token lists differ, None if they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def token_probabilities(render: Callable[[random.Random], list[int]], seed: str) -> tuple[list[int], list[float]]:
    """Return a sampled completion's tokens and the teacher's probability of each given the tokens before it
    (the module docstring derives it). `render(rng)` returns a completion's tokens."""
    sample = ScriptedRandom([], seed)
    tokens = render(sample)
    taken = [index for _, index in sample.draws]
    probabilities = [1.0] * len(tokens)
    for j, (alternatives, index) in enumerate(sample.draws):
        forks = [
            (first_difference(tokens, render(ScriptedRandom([*taken[:j], other, *taken[j + 1 :]], seed))), p)
            for other, p in enumerate(alternatives)
            if other != index and p > 0
        ]
        if any(d is None for d, _ in forks):
            raise ValueError(
                f"draw {j} of {seed!r} has an alternative that writes the same tokens: one it does not show"
            )
        for i in sorted({d for d, _ in forks}):
            agreeing = alternatives[index] + sum(p for d, p in forks if d >= i)
            probabilities[i] *= (agreeing - sum(p for d, p in forks if d == i)) / agreeing
    return tokens, probabilities


def shares(form: str, puzzles: int, tokenizer) -> dict:
    """Return the quartile shares (%) of the sampled tokens with their standard errors, and the completion
    lengths in tokens, over `puzzles` stage-1 puzzles in `form`."""
    records = stage_records(WarmStartConfig(puzzles_per_size=puzzles), "reason")
    counts = []  # per puzzle, tokens per quartile
    for number, record in enumerate(records):

        def render(rng: random.Random, record: dict = record) -> list[int]:
            text = completion(record, True, rng, form) + tokenizer.eos_token
            return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids  # as __call__, faster

        _, probabilities = token_probabilities(render, f"{form}|{number}")
        counts.append([sum(bucket(p) == b for p in probabilities) for b in range(4)])
    lengths = [sum(row) for row in counts]
    total = sum(lengths)
    result = {"shares": [], "errors": [], "mean_length": total / len(lengths), "longest": max(lengths)}
    for b in range(4):
        share = sum(row[b] for row in counts) / total
        spread = sum((row[b] - share * n) ** 2 for row, n in zip(counts, lengths, strict=True))
        result["shares"].append(100 * share)
        result["errors"].append(100 * (spread * len(counts) / (len(counts) - 1)) ** 0.5 / total)
    return result


def calibrated(teacher: list[float]) -> list[float]:
    """Return quartile shares (%) with the shipped warm start's loss of sharpness on the plain form applied: the
    same fraction of the top quartile moved into the lower ones in the same proportions."""
    kept = MEASURED_PLAIN[3] / TEACHER_PLAIN[3]
    gains = [measured - predicted for measured, predicted in zip(MEASURED_PLAIN[:3], TEACHER_PLAIN[:3], strict=True)]
    moved = teacher[3] * (1 - kept)
    return [share + moved * gain / sum(gains) for share, gain in zip(teacher[:3], gains, strict=True)] + [
        teacher[3] * kept
    ]


def stage_one_lengths(form: str, tokenizer) -> tuple[float, int]:
    """Return the mean and longest completion (tokens, without the end token) of the whole stage-1 data set
    in `form`, drawn as `lopti.tasks.kk.warmstart.sft_dataset` draws it."""
    config = WarmStartConfig()
    rng = random.Random(f"{config.seed}|reason")
    records = stage_records(config, "reason")
    texts = [completion(record, True, rng, form) for _ in range(config.copies) for record in records]
    lengths = [
        len(encoding.ids) for encoding in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    ]
    return sum(lengths) / len(lengths), max(lengths)


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="varied")
    parser.add_argument("--puzzles", type=int, default=500)
    parser.add_argument("--stage-one-lengths", action="store_true", help="also the lengths over all stage-1 data")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED / "tiny")
    result = shares(args.form, args.puzzles, tokenizer)
    row = " / ".join
    print(f"form {args.form}, {args.puzzles} puzzles of 3 people, shares per π quartile (%):")
    shown = (f"{x:.1f} ± {e:.1f}" for x, e in zip(result["shares"], result["errors"], strict=True))
    print(f"  teacher:                  {row(shown)}")
    print(f"  calibrated:               {row(f'{x:.1f}' for x in calibrated(result['shares']))}")
    print(f"  plain form, measured:     {row(f'{x:.1f}' for x in MEASURED_PLAIN)} (shipped warm start)")
    print(f"  paper:                    {row(f'{x:.1f}' for x in PAPER)}")
    print(
        f"completion length (tokens, with the end token): mean {result['mean_length']:.1f}, longest {result['longest']}"
    )
    if args.stage_one_lengths:
        mean, longest = stage_one_lengths(args.form, tokenizer)
        print(
            f"stage-1 data ({WarmStartConfig().puzzles_per_size} puzzles × {WarmStartConfig().copies}, tokens without "
            f"the end token): mean {mean:.1f}, longest {longest}"
        )


if __name__ == "__main__":
    main()
