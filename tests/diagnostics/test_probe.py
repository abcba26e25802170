"""The one-update probe: a hand-built single-token case, a tiny model end to end, and bad input."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from lopti.diagnostics.analyze import AnalyzeConfig, analyze
from lopti.diagnostics.probe import ProbeConfig, run_probe
from lopti.diagnostics.rollouts import Rollouts, load_rollouts, save_rollouts


class LogitsOnly(torch.nn.Module):
    """logits = I · h with h a free parameter: the gradient w.r.t. h is the gradient w.r.t. the logits."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.hidden = torch.nn.Parameter(torch.zeros(vocab))
        self.head = torch.nn.Linear(vocab, vocab, bias=False)
        self.head.weight.data = torch.eye(vocab)
        self.head.weight.requires_grad_(False)

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.head(self.hidden).expand(*input_ids.shape, -1))


def test_single_token_case_has_the_known_gradient_norm_and_correct_ratio():
    # One prompt, two one-token responses: token 1 earns 1, token 2 earns 0. GRPO gives Â = ±A with
    # A = 0.5 / (std + 1e-6), std = √0.5; the token-mean loss over 2 tokens has gradient −A/2 · (e_1 − e_2)
    # w.r.t. the logits, of norm A/√2 (≈ 0.5).
    advantage = 0.5 / (math.sqrt(0.5) + 1e-6)
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], group_size=2, temperature=1.0)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3, config=ProbeConfig(lr=0.1))
    assert result["grad_norm"]["grpo"] == pytest.approx(advantage / math.sqrt(2), rel=1e-12)
    assert result["token_share"] == {"[0.00,0.25)": 0.0, "[0.25,0.50)": 1.0, "[0.50,0.75)": 0.0, "[0.75,1.00]": 0.0}
    assert len(result["warnings"]) == 3 and "bucket [0.00,0.25) holds no response token" in result["warnings"][0]
    grpo = result["delta_pi"]["grpo"]["[0.25,0.50)"]
    assert grpo["correct_ratio"] == {"positive": 1.0, "negative": 1.0, "both": 1.0}
    # one SGD step of lr 0.1 moves z_1 up and z_2 down by 0.1 · A/2: the new π_1 follows in closed form
    step = 0.1 * advantage / 2
    new_pi = math.exp(step) / (math.exp(step) + math.exp(-step) + 2)
    assert grpo["positive"]["mean"] == pytest.approx(new_pi - 0.25, rel=1e-9)
    empty = result["delta_pi"]["only [0.00,0.25)"]["[0.25,0.50)"]
    assert result["grad_norm"]["only [0.00,0.25)"] == 0.0 and empty["positive"]["mean"] == 0.0
    assert result["delta_pi"]["grpo"]["[0.00,0.25)"]["correct_ratio"]["both"] is None
    assert result["bound"]["logits"]["inside_fraction"] == 1.0
    assert result["bound"]["hidden"]["correlation_with_1_minus_pi"] is None  # every token has π = 0.25
    json.dumps(result, allow_nan=False)


def test_uniform_rewards_are_reported_not_crashed():
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 1.0], group_size=2, temperature=1.0)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3)
    assert result["grad_norm"] is None and result["delta_pi"] is None
    assert any("all advantages are zero" in w for w in result["warnings"])
    json.dumps(result, allow_nan=False)


@pytest.fixture
def rollouts_file(tiny_model_dir, tmp_path):
    """Rollouts of the tiny model, with rewards replaced by varied ones (a random model earns none)."""
    config = AnalyzeConfig(
        model=str(tiny_model_dir), people="2", template="compact", prompts=3, group_size=4, max_new_tokens=6,
        methods=("grpo",), micro_batch=5,
    )  # fmt: skip
    analyze(config, tmp_path / "first")
    path = tmp_path / "first" / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    rewards = [0.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.2, 0.3, 0.3, 0.3, 0.9]
    edited = [lines[0]] + [json.dumps({**json.loads(x), "reward": r}) for x, r in zip(lines[1:], rewards, strict=True)]
    path.write_text("\n".join(edited) + "\n")
    return config, path


def test_tiny_model_end_to_end_from_saved_rollouts(rollouts_file, tmp_path):
    config, path = rollouts_file
    config.rollouts = str(path)
    result = analyze(config, tmp_path / "second")
    assert math.isclose(sum(result["token_share"].values()), 1.0, rel_tol=1e-12)
    exact, proxy = result["grad_share_exact"], result["grad_share_1_minus_pi"]
    assert math.isclose(sum(exact.values()), 1.0, rel_tol=1e-12) and math.isclose(sum(proxy.values()), 1.0)
    for label in result["buckets"]:  # per token, exact / proxy lies in [√(N/(N−1)), √2] (Prop. 4.2)
        if proxy[label] > 0:
            assert 1 / math.sqrt(2) - 1e-9 <= exact[label] / proxy[label] <= math.sqrt(2) + 1e-9
    assert result["bound"]["logits"]["inside_fraction"] == 1.0
    assert result["bound"]["hidden"]["upper_holds_fraction"] == 1.0
    assert result["groups_with_reward_spread"] == 3 and result["grad_norm"]["grpo"] > 0
    assert set(result["figures"]) == {"delta_pi", "correct_ratio", "gradient_bounds"}
    for name in result["figures"].values():
        assert (tmp_path / "second" / name).stat().st_size > 1000
    again = analyze(config, tmp_path / "third")
    assert again["grad_norm"] == result["grad_norm"] and again["delta_pi"] == result["delta_pi"]


def test_rollouts_of_another_tokenizer_are_refused(rollouts_file, tmp_path):
    _, path = rollouts_file
    other = type("Tok", (), {"get_vocab": lambda self: {"a": 0, "b": 1}, "__len__": lambda self: 2})()
    with pytest.raises(ValueError, match="was made with another tokenizer"):
        load_rollouts(path, other)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    with pytest.raises(ValueError, match="not a lopti rollouts file"):
        load_rollouts(broken, other)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="bucket edges must rise strictly"):
        ProbeConfig(edges=(0, 0.7, 0.3, 1)).check()
    with pytest.raises(ValueError, match="optimizer must be one of sgd, adamw"):
        ProbeConfig(optimizer="adam").check()
    with pytest.raises(ValueError, match="unknown method"):
        ProbeConfig(methods=("grpo", "ppo")).check()


def test_save_and_load_round_trip(tmp_path):
    tokenizer = type("Tok", (), {"get_vocab": lambda self: {"a": 0, "b": 1, "c": 2}, "__len__": lambda self: 3})()
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], group_size=2, temperature=0.7)
    save_rollouts(rollouts, tokenizer, tmp_path / "r.jsonl")
    assert load_rollouts(tmp_path / "r.jsonl", tokenizer) == rollouts
