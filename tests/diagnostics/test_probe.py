"""The one-update probe: hand-built single-token cases (SGD and AdamW, fresh and warm), credit presets, a tiny
model end to end, and bad input."""

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from lopti.core.credit import TokenCredit
from lopti.core.objective import token_objective
from lopti.diagnostics import probe
from lopti.diagnostics.analyze import AnalyzeConfig, analyze, training_rows
from lopti.diagnostics.probe import ProbeConfig, Update, batch_advantages, make_batch, policy_gradient, run_probe
from lopti.diagnostics.rollouts import Rollouts, load_rollouts, save_rollouts
from lopti.models.loading import load_model, load_tokenizer


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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **positions) -> SimpleNamespace:
        return SimpleNamespace(logits=self.head(self.hidden).expand(*input_ids.shape, -1))


def test_single_token_case_has_the_known_gradient_norm_and_correct_ratio():
    # One prompt, two one-token responses: token 1 earns 1, token 2 earns 0. GRPO gives Â = ±A with
    # A = 0.5 / (std + 1e-6), std = √0.5; the token-mean loss over 2 tokens has gradient −A/2 · (e_1 − e_2)
    # w.r.t. the logits, of norm A/√2 (≈ 0.5).
    advantage = 0.5 / (math.sqrt(0.5) + 1e-6)
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3, config=ProbeConfig(lr=0.1, ar_alpha=0.3))
    sgd = result["updates"]["sgd"]
    assert sgd["grpo"]["grad_norm"][0]["mean"] == pytest.approx(advantage / math.sqrt(2), rel=1e-12)
    assert result["token_share"] == {"[0.00,0.25)": 0.0, "[0.25,0.50)": 1.0, "[0.50,0.75)": 0.0, "[0.75,1.00]": 0.0}
    assert len(result["warnings"]) == 3 and "bucket [0.00,0.25) holds no response token" in result["warnings"][0]
    grpo = sgd["grpo"]["delta_pi"]["[0.25,0.50)"]
    assert grpo["correct_ratio"] == {"positive": 1.0, "negative": 1.0, "both": 1.0}
    # one batch: a mean without an interval
    assert sgd["grpo"]["correct_ratio"]["[0.25,0.50)"]["positive"] == {
        "mean": 1.0,
        "low": None,
        "high": None,
        "batches": 1,
        "per_batch": [1.0],
    }
    # one SGD step of lr 0.1 moves z_1 up and z_2 down by 0.1 · A/2: the new π_1 follows in closed form
    step = 0.1 * advantage / 2
    new_pi = math.exp(step) / (math.exp(step) + math.exp(-step) + 2)
    assert grpo["positive"]["mean"] == pytest.approx(new_pi - 0.25, rel=1e-9)
    empty = sgd["only [0.00,0.25)"]["delta_pi"]["[0.25,0.50)"]
    assert sgd["only [0.00,0.25)"]["grad_norm"][0]["mean"] == 0.0 and empty["positive"]["mean"] == 0.0
    assert sgd["grpo"]["delta_pi"]["[0.00,0.25)"]["correct_ratio"]["both"] is None
    assert result["bound"]["logits"]["inside_fraction"] == 1.0
    assert result["bound"]["hidden"]["correlation_with_1_minus_pi"] is None  # every token has π = 0.25
    json.dumps(result, allow_nan=False)


def adamw_coordinate(grads: list[float], lr: float, decay: float, state=(0.0, 0.0, 0), x: float = 0.0):
    """Return (x, (m, v, t)) after AdamW steps on one coordinate: Loshchilov & Hutter's rule, as PyTorch writes it."""
    m, v, t = state
    for g in grads:
        t += 1
        x *= 1 - lr * decay
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        x -= lr * (m / (1 - 0.9**t)) / (math.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return x, (m, v, t)


def softmax_share(z: list[float], k: int) -> float:
    return math.exp(z[k]) / sum(math.exp(v) for v in z)


ADAMW = dict(adam_lr=0.1, weight_decay=0.01, max_grad_norm=1.0)  # the gradient norm (≈ 0.5) is never clipped


def test_fresh_adamw_moves_each_weight_by_lr_and_lopti_keeps_moving_on_momentum():
    # The single-token case under AdamW: the loss gradient is g = (0, −a, a, 0), a = A/2. The first step moves
    # z_1 and z_2 by ±lr·a/(a + eps) whatever a is. Lopti's phase 1 takes all tokens (π_old = 0.25 < η) and its
    # phase 2 none (g = 0), yet AdamW's second step moves them on again by momentum (under SGD it would not).
    a = 0.5 / (math.sqrt(0.5) + 1e-6) / 2
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    config = ProbeConfig(optimizers=("sgd", "adamw"), methods=("grpo", "lopti"), **ADAMW)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3, config=config)
    for method, grads in (("grpo", [-a]), ("lopti", [-a, 0.0])):
        z1, _ = adamw_coordinate(grads, 0.1, 0.01)
        expected = softmax_share([0.0, z1, -z1, 0.0], 1) - 0.25
        moved = result["updates"]["adamw"][method]["delta_pi"]["[0.25,0.50)"]
        assert moved["positive"]["mean"] == pytest.approx(expected, rel=1e-9)
        assert moved["negative"]["mean"] == pytest.approx(softmax_share([0.0, z1, -z1, 0.0], 2) - 0.25, rel=1e-9)
    assert adamw_coordinate([-a, 0.0], 0.1, 0.01)[0] > 1.6 * adamw_coordinate([-a], 0.1, 0.01)[0]
    sgd = result["updates"]["sgd"]
    assert sgd["lopti"]["delta_pi"] == sgd["grpo"]["delta_pi"]  # SGD: the empty phase 2 adds nothing


def test_warm_adamw_carries_the_other_batches_moments():
    # Warm-up batch: token 3 earns 1, token 2 earns 0: g_w = (0, 0, a, −a). Then the weights go back to zero and
    # the probe's batch (g = (0, −a, a, 0)) is stepped with the warmed moments: z_3 keeps rising on momentum,
    # and z_1's step is smaller than lr (its second moment is averaged over two steps, one of them zero).
    a = 0.5 / (math.sqrt(0.5) + 1e-6) / 2
    warmup = [Rollouts([[0], [0]], [[3], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)]
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    config = ProbeConfig(optimizers=("adamw_warm",), methods=("grpo", "lopti"), warmup_updates=1, **ADAMW)
    result = run_probe(LogitsOnly(4), [rollouts], pad_id=3, config=config, warmup=warmup)
    for method, warm_grads, grads in (
        ("grpo", [(0, 0, a, -a)], [(0, -a, a, 0)]),
        ("lopti", [(0, 0, a, -a), (0,) * 4], [(0, -a, a, 0), (0,) * 4]),
    ):
        z = []
        for coordinate in range(4):
            _, state = adamw_coordinate([g[coordinate] for g in warm_grads], 0.1, 0.01)
            z.append(adamw_coordinate([g[coordinate] for g in grads], 0.1, 0.01, state)[0])
        if method == "grpo":  # momentum from the other batch; a damped step in a new direction
            assert z[3] > 0 and 0 < z[1] < 0.1
        moved = result["updates"]["adamw_warm"][method]["delta_pi"]["[0.25,0.50)"]
        assert moved["positive"]["mean"] == pytest.approx(softmax_share(z, 1) - 0.25, rel=1e-9)
        assert moved["negative"]["mean"] == pytest.approx(softmax_share(z, 2) - 0.25, rel=1e-9)
    with pytest.raises(ValueError, match="adamw_warm needs warm-up batches"):
        run_probe(LogitsOnly(4), rollouts, pad_id=3, config=config)


def test_correct_ratios_of_identical_batches_have_a_zero_width_interval():
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    config = ProbeConfig(lr=0.1, methods=("grpo", "ar"), ar_alpha=0.3)
    result = run_probe(LogitsOnly(4), [rollouts] * 3, pad_id=3, config=config)
    cell = result["updates"]["sgd"]["grpo"]["correct_ratio"]["all"]["negative"]
    assert cell == {"mean": 1.0, "low": 1.0, "high": 1.0, "batches": 3, "per_batch": [1.0, 1.0, 1.0]}
    assert result["updates"]["sgd"]["ar"]["minus_grpo"]["all"]["positive"] == {
        "mean": 0.0,
        "low": 0.0,
        "high": 0.0,
        "batches": 3,
    }
    assert result["batches"] == 3 and result["responses"] == 6 and result["tokens"] == 6


def test_uniform_rewards_are_reported_not_crashed():
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 1.0], num_generations=2, temperature=1.0)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3, config=ProbeConfig(ar_alpha=0.3))
    assert result["updates"] is None
    assert any("all advantages are zero" in w for w in result["warnings"])
    json.dumps(result, allow_nan=False)


def test_tiny_model_end_to_end_from_saved_rollouts(rollouts_file, tmp_path):
    config, path = rollouts_file
    # the file's 3 groups as 2 analysed batches of one prompt and one warm-up batch; comma lists as the CLI gives
    config = replace(
        config, rollouts=str(path), prompts=1, batches=2, optimizers="sgd,adamw,adamw_warm", warmup_updates=1,
        methods="grpo,lopti",
    )  # fmt: skip
    result = analyze(config, tmp_path / "second")
    assert math.isclose(sum(result["token_share"].values()), 1.0, rel_tol=1e-12)
    exact, proxy = result["grad_share_exact"], result["grad_share_1_minus_pi"]
    assert math.isclose(sum(exact.values()), 1.0, rel_tol=1e-12) and math.isclose(sum(proxy.values()), 1.0)
    for label in result["buckets"]:  # per token, exact / proxy lies in [√(N/(N−1)), √2] (Prop. 4.2)
        if proxy[label] > 0:
            assert 1 / math.sqrt(2) - 1e-9 <= exact[label] / proxy[label] <= math.sqrt(2) + 1e-9
    for side in ("positive", "negative"):
        assert math.isclose(sum(result[f"grad_share_exact_{side}"].values()), 1.0, rel_tol=1e-12)
    assert result["bound"]["logits"]["inside_fraction"] == 1.0
    assert result["bound"]["hidden"]["upper_holds_fraction"] == 1.0
    assert result["batches"] == 2 and result["groups_with_reward_spread"] == 2
    assert list(result["updates"]) == ["sgd", "adamw", "adamw_warm"]
    assert set(result["updates"]["sgd"]) == {f"only {k}" for k in result["buckets"]} | {"grpo", "lopti"}
    assert set(result["updates"]["adamw_warm"]) == {"grpo", "lopti"}  # bucket-only updates: first regime only
    for regime in result["updates"].values():
        cell = regime["lopti"]["correct_ratio"]["all"]["positive"]
        assert cell["batches"] == 2 and cell["low"] <= cell["mean"] <= cell["high"]
        assert regime["lopti"]["minus_grpo"]["all"]["positive"]["batches"] == 2
        assert len(regime["lopti"]["grad_norm"]) == 2 and regime["grpo"]["grad_norm"][0]["mean"] > 0
    # each regime steps its own way: the same batch, three different moves
    moved = {r: result["updates"][r]["grpo"]["delta_pi"]["all"]["positive"]["mean_abs"] for r in result["updates"]}
    assert len(set(moved.values())) == 3 and min(moved.values()) > 0
    summary = (tmp_path / "second" / "summary.md").read_text()
    assert "| adamw_warm | lopti − grpo | >0 |" in summary and "[" in summary
    assert set(result["figures"]) == {"delta_pi", "correct_ratio", "gradient_bounds"}
    for name in result["figures"].values():
        assert (tmp_path / "second" / name).stat().st_size > 1000
    again = analyze(config, tmp_path / "third")
    assert again["updates"] == result["updates"]
    with pytest.raises(
        ValueError, match=r"holds 3 groups, but 4 batches \(warm-up ones included\) of 1 prompts need 4"
    ):
        analyze(replace(config, batches=3), tmp_path / "fourth")


def test_packed_forward_gives_the_padded_log_probs_with_each_prompt_once(rollouts_file, tiny_model_dir):
    # micro-batches of 5 rows over groups of 4: one packs a whole group plus one row of the next prompt
    _, path = rollouts_file
    model = load_model(str(tiny_model_dir)).double().eval()
    rollouts = load_rollouts(path, load_tokenizer(str(tiny_model_dir)))
    batch = make_batch(rollouts, pad_id=0)
    seen = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    packed = probe.token_logprobs(model, batch, 1.0, ProbeConfig(micro_batch=5, packed=True))
    packed_tokens, seen[:] = sum(seen), []
    padded = probe.token_logprobs(model, batch, 1.0, ProbeConfig(micro_batch=5, packed=False))
    assert packed_tokens < 0.75 * sum(seen)
    assert torch.allclose(packed[batch.mask], padded[batch.mask], rtol=0, atol=1e-10)
    assert (packed[~batch.mask] == 0).all()  # padding predicts nothing: no log-prob there
    # the padded path is the sampling-time computation: each row alone, right after its prompt
    row = 5
    prompt, response = rollouts.prompt_ids[row], rollouts.completion_ids[row]
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
    expected = alone.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
    assert torch.allclose(padded[row, : len(response)], expected, rtol=0, atol=1e-10)


def test_rollouts_of_another_tokenizer_are_refused(rollouts_file, tmp_path):
    _, path = rollouts_file
    other = type("Tok", (), {"get_vocab": lambda self: {"a": 0, "b": 1}, "__len__": lambda self: 2})()
    with pytest.raises(ValueError, match="was made with another tokenizer"):
        load_rollouts(path, other)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    with pytest.raises(ValueError, match="not a lopti rollouts file"):
        load_rollouts(broken, other)


def test_save_and_load_round_trip(tmp_path):
    tokenizer = type("Tok", (), {"get_vocab": lambda self: {"a": 0, "b": 1, "c": 2}, "__len__": lambda self: 3})()
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=0.7)
    save_rollouts(rollouts, tokenizer, tmp_path / "r.jsonl")
    assert load_rollouts(tmp_path / "r.jsonl", tokenizer) == rollouts


def test_batches_get_distinct_prompts_in_the_same_mix():
    # the task lists prompts size by size; dealt out in turn, each batch holds both sizes equally
    rows = training_rows(AnalyzeConfig(task="kk", people="3,4", template="terse", prompts=4), batches=3)
    assert [row["people"] for row in rows] == [3, 3, 4, 4] * 3
    assert len({str(row["prompt"]) for row in rows}) == 12


def test_w_reinforce_update_is_the_weighted_gradient_step():
    # The single-token case with W-REINFORCE (λ = 0.1 on Â > 0): the loss gradient at the logits is
    # (−0.1·A·(e_1 − π) + A·(e_2 − π)) / 2 with π uniform, so one SGD step of lr gives z = s·(0.1·e_1 − e_2) up to
    # a constant shift, s = lr·A/2; the preset's mean weight over the two tokens is (0.1 + 1) / 2.
    advantage = 0.5 / (math.sqrt(0.5) + 1e-6)
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    result = run_probe(LogitsOnly(4), rollouts, pad_id=3, config=ProbeConfig(lr=0.1, methods="grpo,w_reinforce"))
    step = 0.1 * advantage / 2
    z = [0.0, 0.1 * step, -step, 0.0]
    moved = result["updates"]["sgd"]["w_reinforce"]["delta_pi"]["[0.25,0.50)"]
    assert moved["positive"]["mean"] == pytest.approx(softmax_share(z, 1) - 0.25, rel=1e-9)
    assert moved["negative"]["mean"] == pytest.approx(softmax_share(z, 2) - 0.25, rel=1e-9)
    gradient = [advantage / 2 * (v + 0.9 * 0.25) for v in (0.0, 0.1, -1.0, 0.0)]
    norm = result["updates"]["sgd"]["w_reinforce"]["grad_norm"][0]["mean"]
    assert norm == pytest.approx(math.sqrt(sum(g * g for g in gradient)), rel=1e-12)
    assert result["credit"] == {
        "w_reinforce": {"w_reinforce_weight_mean": {"mean": 0.55, "low": None, "high": None, "batches": 1}}
    }


def test_dropped_tokens_leave_the_denominator_as_in_the_trainer():
    # A credit step that drops the negative token: the token-mean is over the one kept token, so the gradient
    # is −A·(e_1 − π) (norm A·√0.75), not half of it.
    advantage = 0.5 / (math.sqrt(0.5) + 1e-6)
    rollouts = Rollouts([[0], [0]], [[1], [2]], [1.0, 0.0], num_generations=2, temperature=1.0)
    model, config = LogitsOnly(4).double(), ProbeConfig()
    batch = make_batch(rollouts, pad_id=3)
    old = torch.full(batch.mask.shape, math.log(0.25), dtype=torch.float64)
    advantages = batch_advantages(rollouts, batch, torch.float64)

    def drop_negative(context):
        return TokenCredit(drop=context.advantages < 0)

    update = Update(advantages, credit={"drop_negative": drop_negative})
    tally = {}
    norm = policy_gradient(model, batch, old, update, None, 1.0, config, tally)
    assert norm == pytest.approx(advantage * math.sqrt(0.75), rel=1e-12)
    assert tally == {"drop_negative_kept_share": [1.0, 2.0]}


def reference_paper_update(method, advantages, config):
    """The probe's update of the four paper methods before presets: (AR on, Lopti on) by name."""
    uses_ar, uses_lopti = {"grpo": (0, 0), "ar": (1, 0), "lopti": (0, 1), "ar+lopti": (1, 1)}[method]
    return Update(advantages, config.ar_alpha if uses_ar else 0.0, bool(uses_lopti))


def reference_paper_gradient(model, batch, old, update, phase, temperature, config, tally=None):
    """The probe's gradient before presets: the objective with AR's α and the Lopti phase only."""
    model.zero_grad(set_to_none=True)
    count = batch.mask.sum()
    for rows in probe._micro(batch, config.micro_batch):
        logits = probe._logits(model, batch, rows, temperature, config.packed)
        logp = torch.log_softmax(logits, -1).gather(-1, batch.targets[rows].unsqueeze(-1)).squeeze(-1)
        terms = token_objective(
            logp, old[rows], update.advantages[rows], batch.mask[rows],
            alpha=update.alpha, phase=phase, eta=config.lopti_eta,
            eps_low=config.epsilon, eps_high=config.epsilon_high, dual_clip=config.dual_clip,
        )  # fmt: skip
        (terms.policy.sum() / count).backward()
    squares = [p.grad.double().square().sum() for p in model.parameters() if p.grad is not None]
    return sum(squares).sqrt().item() if squares else 0.0


def test_paper_methods_are_unchanged_by_the_preset_path(rollouts_file, tmp_path, monkeypatch):
    # The four paper methods through the method-name path give exactly the numbers of the AR/Lopti-only path.
    config, path = rollouts_file
    config = replace(
        config, rollouts=str(path), prompts=1, batches=2, optimizers="sgd,adamw,adamw_warm", warmup_updates=1,
        methods="grpo,ar,lopti,ar+lopti",
    )  # fmt: skip
    torch.manual_seed(0)
    result = analyze(config, tmp_path / "new")
    monkeypatch.setattr(probe, "method_update", reference_paper_update)
    monkeypatch.setattr(probe, "policy_gradient", reference_paper_gradient)
    reference = analyze(config, tmp_path / "reference")
    assert result["updates"] == reference["updates"] and result["credit"] == {}
    assert set(result["updates"]["adamw_warm"]) == {"grpo", "ar", "lopti", "ar+lopti"}


def test_tiny_model_probes_credit_presets_by_name(rollouts_file, tmp_path):
    config, path = rollouts_file
    config = replace(config, rollouts=str(path), prompts=1, batches=2, methods="grpo,entropy20,ar+stapo,w_reinforce")
    result = analyze(config, tmp_path / "presets")
    sgd = result["updates"]["sgd"]
    for method in ("entropy20", "ar+stapo", "w_reinforce"):
        for sign in ("positive", "negative"):
            cell = sgd[method]["correct_ratio"]["all"][sign]
            assert cell["batches"] == 2 and 0.0 <= cell["mean"] <= 1.0
        assert sgd[method]["minus_grpo"]["all"]["positive"]["batches"] == 2
    # the top 20% of each micro-batch's entropies keep their gradient (ties aside); the update differs from GRPO's
    kept = result["credit"]["entropy20"]["high_entropy_kept_share"]["mean"]
    assert 0.2 <= kept < 0.3
    assert sgd["entropy20"]["delta_pi"] != sgd["grpo"]["delta_pi"]
    assert 0.0 < result["credit"]["ar+stapo"]["stapo_kept_share"]["mean"] <= 1.0
    assert 0.1 < result["credit"]["w_reinforce"]["w_reinforce_weight_mean"]["mean"] < 1.0
    assert set(result["credit"]) == {"entropy20", "ar+stapo", "w_reinforce"}
    summary = (tmp_path / "presets" / "summary.md").read_text()
    assert "| entropy20 | credit/high_entropy_kept_share | " in summary
    assert "| sgd | ar+stapo | <0 |" in summary and "| sgd | w_reinforce − grpo | >0 |" in summary
    saved = json.loads((tmp_path / "presets" / "analysis.json").read_text())
    assert saved["credit"]["entropy20"]["high_entropy_kept_share"]["mean"] == kept
