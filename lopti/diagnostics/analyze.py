"""`lopti analyze`: roll out (or load rollouts), run the one-update probe, write JSON, PNGs and a summary.

`--methods` takes any method name of `lopti.core.methods` (paper methods, token-credit presets, their
combinations); each is probed with the trainer's own objective.

The output folder holds analysis.json (every number), rollouts.jsonl (the analysed batches, then the
warm-up batches, reusable with --rollouts), summary.md and the figures delta_pi.png, correct_ratio.png,
gradient_bounds.png.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from lopti.diagnostics.plots import plot_correct_ratio, plot_delta_pi, plot_gradient_bounds
from lopti.diagnostics.probe import ProbeConfig, run_probe
from lopti.diagnostics.rollouts import collect_rollouts, load_rollouts, save_rollouts, split_groups
from lopti.errors import check_number
from lopti.models.embedded import model_task
from lopti.models.loading import MODEL_HELP, load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import DEFAULT_TASK, PromptSettings, get_task, task_data_field

DEFAULT_MODEL = "tiny"


@dataclass
class AnalyzeConfig(PromptSettings, ProbeConfig):
    """The batches to analyse (model, the kind of task prompts, rollout settings) and the probe's update settings."""

    model: str = field(default=DEFAULT_MODEL, metadata={"help": MODEL_HELP})
    # the default model is a task's own, trained on that task's text alone: its task is the default one here
    task: str = task_data_field("task", default=model_task(DEFAULT_MODEL) or DEFAULT_TASK)
    # the batches are `prompts` × `batches` generated training prompts (`training_rows`): no split sizes
    train_puzzles: int = field(default=0, init=False)
    eval_puzzles: int = field(default=0, init=False)
    reward: str | None = field(default=None, metadata={"help": "Reward of the rollouts; null: the task's accuracy."})
    prompts: int = field(default=16, metadata={"help": "Training prompts in each analysed batch."})
    # the trainer's keys for the same quantities; the probe's batches are its own, so --config leaves them
    num_generations: int = field(
        default=8, metadata={"help": "Responses sampled per prompt (not taken from --config)."}
    )
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the rollouts (not taken from --config)."}
    )
    max_completion_length: int = field(
        default=128, metadata={"help": "Token budget of each response (not taken from --config)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the sampling and of the update."})
    rollouts: str | None = field(
        default=None,
        metadata={
            "help": "Analyse these saved rollouts (a rollouts.jsonl: the analysed batches, then the warm-up ones) "
            "instead of sampling."
        },
    )
    batches: int = field(
        default=1,
        metadata={
            "help": "Independent batches of `prompts` prompts each (different prompts): the correct ratios get a "
            "95% interval over them (docs/analysis.md uses 8 for the tiny model, 4 for SmolLM2-135M).",
        },
    )

    def __post_init__(self) -> None:
        check_number("num_generations", self.num_generations, low=2)
        check_number("temperature", self.temperature, above=0)
        check_number("max_completion_length", self.max_completion_length, low=1)
        check_number("batches", self.batches, low=1)
        if not self.ar_alpha:  # none given, or a GRPO run's 0: the task's own, as `lopti compare` takes it
            self.ar_alpha = get_task(self.task).ar_alpha
        self.check()


def training_rows(config: AnalyzeConfig, batches: int) -> list[dict[str, Any]]:
    """Return `batches` × `prompts` training prompts, batch after batch (the analysis looks at training batches).

    The task lists its prompts size by size (or level by level); dealing them out in turn gives every batch
    the same mix.
    """
    task = get_task(config.task)
    count = config.prompts * batches
    # `count` per group of the task: dealt out below
    data = task.own_data(
        vars(config) | {"template": task.prompt_template(config), "train_puzzles": count, "eval_puzzles": 1}
    )
    rows = task.rows(data)[0]
    rows = rows[:: max(1, len(rows) // count)][:count]  # the task gives `count` per size or level
    return [row for k in range(batches) for row in rows[k::batches]]


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def interval_cell(cell: dict[str, Any], signed: bool = False) -> str:
    """Return "0.652 [0.610, 0.694]" (the mean over batches and its 95% interval), "–" if undefined."""
    if cell["mean"] is None:
        return "–"
    form = "{:+.3f}" if signed else "{:.3f}"
    text = form.format(cell["mean"])
    if cell["low"] is not None:
        text += f" [{form.format(cell['low'])}, {form.format(cell['high'])}]"
    return text


def _share_rows(result: dict[str, Any]) -> list[str]:
    labels = result["buckets"]
    rows = [
        ("token share", "token_share"),
        ("token share, Â>0", "token_share_positive"),
        ("token share, Â<0", "token_share_negative"),
        ("share of Σ|Â|·‖∂z‖", "grad_share_exact"),
        ("share of Σ|Â|·‖∂z‖, Â>0", "grad_share_exact_positive"),
        ("share of Σ|Â|·‖∂z‖, Â<0", "grad_share_exact_negative"),
        ("share of Σ|Â|·(1−π)", "grad_share_1_minus_pi"),
    ]
    return [
        f"| {name} | " + " | ".join(f"{100 * result[key][k]:.1f}%" for k in labels) + " | 100% |" for name, key in rows
    ]


def correct_ratio_table(result: dict[str, Any]) -> list[str]:
    """Return markdown rows: per regime, method and sign, the correct ratio per bucket with its interval,
    then each method's paired difference from GRPO."""
    labels = [*result["buckets"], "all"]
    lines = [
        "| optimizer | method | Â | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 3) + "|",
    ]
    for regime, updates in result["updates"].items():
        methods = [m for m in updates if not m.startswith("only ")]
        for sign, mark in (("positive", ">0"), ("negative", "<0")):
            for method in methods:
                cells = " | ".join(interval_cell(updates[method]["correct_ratio"][k][sign]) for k in labels)
                lines.append(f"| {regime} | {method} | {mark} | {cells} |")
            for method in methods:
                if "minus_grpo" in updates[method]:
                    cells = " | ".join(
                        interval_cell(updates[method]["minus_grpo"][k][sign], signed=True) for k in labels
                    )
                    lines.append(f"| {regime} | {method} − grpo | {mark} | {cells} |")
    return lines


def credit_table(result: dict[str, Any]) -> list[str]:
    """Return markdown rows of each preset's share of tokens kept / mean weight / share selected, per method."""
    if not result.get("credit"):
        return []
    lines = [
        "",
        "Token credit of the presets, as the trainer logs it (`credit/*`): share of response tokens that keep their "
        "policy gradient, mean weight, share singled out; mean over batches [95% t interval], over the steps of "
        "the first optimizer regime (both phases with Lopti).",
        "",
        "| method | metric | value |",
        "|---|---|---|",
    ]
    for method, shares in result["credit"].items():
        lines += [f"| {method} | credit/{key} | {interval_cell(cell)} |" for key, cell in shares.items()]
    return lines


def summary_markdown(result: dict[str, Any]) -> str:
    """Return the headline numbers as markdown tables: shares, gradient norms, correct ratios, bounds."""
    labels = result["buckets"]
    lines = [
        f"{result['batches']} batch(es), {result['responses']} responses ({result['num_generations']} per prompt, "
        f"T={result['temperature']}), {result['tokens']} response tokens, {result['groups_with_reward_spread']} "
        "groups with reward spread.",
        "",
        "| π_old bucket | " + " | ".join(labels) + " | all |",
        "|---" * (len(labels) + 2) + "|",
        *_share_rows(result),
    ]
    if result["updates"]:
        first = next(iter(result["updates"].values()))
        if f"only {labels[0]}" in first:
            norms = " | ".join(interval_cell(first[f"only {k}"]["grad_norm"][0]) for k in labels)
            whole = interval_cell(first["grpo"]["grad_norm"][0]) if "grpo" in first else "–"
            lines.append(f"| grad norm, only this bucket | {norms} | {whole} |")
        lines += [
            "",
            f"Correct ratio (share of tokens whose π moved the way Â asks: rose for Â>0, fell for Â<0): mean over "
            f'{result["batches"]} batch(es) [95% t interval]; "method − grpo" is the paired difference per batch.',
            "",
            *correct_ratio_table(result),
            *credit_table(result),
        ]
    bound, hidden = result["bound"], result["bound"]["hidden"]
    lines += [
        "",
        f"Proposition 4.2 over {bound['tokens']} tokens: inside the logit bounds "
        f"{100 * bound['logits']['inside_fraction']:.2f}%; at the last hidden state the upper bound holds for "
        f"{100 * hidden['upper_holds_fraction']:.2f}% and the (not guaranteed) lower bound for "
        f"{100 * hidden['lower_holds_fraction']:.2f}%; "
        f"corr(‖∂h‖, 1 − π) = {_number(hidden['correlation_with_1_minus_pi'])}.",
    ]
    lines += [f"\nWarning: {w}" for w in result["warnings"]]
    return "\n".join(lines) + "\n"


def analyze(config: AnalyzeConfig, out: str | Path) -> dict[str, Any]:
    """Run the probe for `config` and fill the folder `out`; return the result."""
    torch.manual_seed(config.seed)
    task = get_task(config.task)
    reward = config.reward or task.accuracy_reward
    if reward not in task.rewards:
        raise ValueError(f"unknown {task.name} reward {reward!r}; choose from {', '.join(task.rewards)}")
    warmup = config.warmup_updates if "adamw_warm" in config.optimizers else 0
    parts = config.batches + warmup  # the analysed batches, then the warm-up ones
    rows = None if config.rollouts else training_rows(config, parts)  # bad task settings fail before loading
    model_path = resolve_model(config.model)
    tokenizer = load_tokenizer(model_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if config.rollouts:
        rollouts = load_rollouts(config.rollouts, tokenizer)
        model = load_model(model_path)
    else:
        model = load_model(model_path)
        rollouts = collect_rollouts(
            model, tokenizer, rows, config.task, reward, config.num_generations, config.temperature,
            config.max_completion_length, config.seed,
        )  # fmt: skip
    save_rollouts(rollouts, tokenizer, out / "rollouts.jsonl")
    batches = split_groups(rollouts, config.prompts, parts, config.rollouts or "the rollouts")
    probe_fields = {f.name for f in fields(ProbeConfig)}
    result = run_probe(
        model,
        batches[: config.batches],
        tokenizer.pad_token_id,
        ProbeConfig(**{k: getattr(config, k) for k in probe_fields}),
        warmup=batches[config.batches :],
    )
    given = [item.name for item in fields(config) if item.init and item.name not in probe_fields]
    result["settings"] = {key: getattr(config, key) for key in given} | {"reward": reward}
    figures = {
        "delta_pi": plot_delta_pi(result, out / "delta_pi.png"),
        "correct_ratio": plot_correct_ratio(result, out / "correct_ratio.png"),
        "gradient_bounds": plot_gradient_bounds(result, out / "gradient_bounds.png"),
    }
    result["figures"] = {name: path.name for name, path in figures.items() if path is not None}
    (out / "analysis.json").write_text(json.dumps(result, indent=1, allow_nan=False))  # a NaN is a bug here
    (out / "summary.md").write_text(summary_markdown(result))
    return result
