"""`lopti analyze`: roll out (or load rollouts), run the one-update probe, write JSON, PNGs and a summary.

The output folder holds analysis.json (every number), rollouts.jsonl (the analysed batch, reusable with
--rollouts), summary.md and the figures delta_pi.png, correct_ratio.png, gradient_bounds.png.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from lopti.diagnostics.plots import plot_correct_ratio, plot_delta_pi, plot_gradient_bounds
from lopti.diagnostics.probe import ProbeConfig, run_probe
from lopti.diagnostics.rollouts import collect_rollouts, load_rollouts, save_rollouts
from lopti.models.loading import load_model, load_tokenizer, resolve_model
from lopti.tasks.registry import TaskData, get_task, task_data_field


@dataclass
class AnalyzeConfig(ProbeConfig):
    """The batch to analyse (model, task prompts, rollout settings) and the probe's update settings."""

    model: str = field(
        default="tiny", metadata={"help": "Embedded model name (tiny, smollm2-135m), 🤗 folder or hub id."}
    )
    task: str = task_data_field("task")
    people: str = task_data_field("people", default="2-3")
    levels: str = task_data_field("levels")
    template: str | None = task_data_field("template")
    fixed_names: bool = task_data_field("fixed_names")
    reward: str | None = field(default=None, metadata={"help": "Reward of the rollouts; null: the task's accuracy."})
    prompts: int = field(default=16, metadata={"help": "Training prompts in the analysed batch."})
    group_size: int = field(default=8, metadata={"help": "Responses sampled per prompt."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the rollouts."})
    max_new_tokens: int = field(default=128, metadata={"help": "Token budget of each response."})
    data_seed: int = task_data_field("data_seed")
    seed: int = field(default=0, metadata={"help": "Seed of the sampling and of the update."})
    rollouts: str | None = field(
        default=None, metadata={"help": "Analyse these saved rollouts (a rollouts.jsonl) instead of sampling."}
    )


def training_rows(config: AnalyzeConfig) -> list[dict[str, Any]]:
    """Return `prompts` training prompts of the task (the analysis looks at a training batch)."""
    task = get_task(config.task)
    data = TaskData(
        task=config.task,
        people=config.people,
        levels=config.levels,
        template=config.template or task.default_template,
        fixed_names=config.fixed_names,
        data_seed=config.data_seed,
        train_puzzles=config.prompts,  # per size or level; spread over them below
        eval_puzzles=1,
    )
    rows = task.rows(data)[0]
    return rows[:: max(1, len(rows) // config.prompts)][: config.prompts]


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def summary_markdown(result: dict[str, Any]) -> str:
    """Return the headline numbers as markdown tables: shares, gradient norms, correct ratios, bounds."""
    labels = result["buckets"]
    lines = [
        f"{result['responses']} responses ({result['group_size']} per prompt, T={result['temperature']}), "
        f"{result['tokens']} response tokens, {result['groups_with_reward_spread']} groups with reward spread.",
        "",
        "| π_old bucket | " + " | ".join(labels) + " | all |",
        "|---" * (len(labels) + 2) + "|",
        "| token share | " + " | ".join(f"{100 * result['token_share'][k]:.1f}%" for k in labels) + " | 100% |",
    ]
    for key, name in (("grad_share_exact", "share of Σ|Â|·‖∂z‖"), ("grad_share_1_minus_pi", "share of Σ|Â|·(1−π)")):
        lines.append(f"| {name} | " + " | ".join(f"{100 * result[key][k]:.1f}%" for k in labels) + " | 100% |")
    if result.get("grad_norm"):
        norms = result["grad_norm"]
        row = " | ".join(f"{norms[f'only {k}']:.3g}" for k in labels)
        lines.append(f"| grad norm, only this bucket | {row} | {norms.get('grpo', float('nan')):.3g} |")
        for method in ("grpo", "ar", "lopti", "ar+lopti"):
            if method in result["delta_pi"]:
                table = result["delta_pi"][method]
                ratios = [table[k]["correct_ratio"]["positive"] for k in [*labels, "all"]]
                cells = " | ".join("–" if r is None else f"{r:.3f}" for r in ratios)
                lines.append(f"| correct ratio (Â>0), {method} | {cells} |")
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
    config.check()
    torch.manual_seed(config.seed)
    task = get_task(config.task)
    reward = config.reward or task.accuracy_reward
    if reward not in task.rewards:
        raise ValueError(f"unknown {task.name} reward {reward!r}; choose from {', '.join(task.rewards)}")
    rows = None if config.rollouts else training_rows(config)  # bad task settings fail before loading
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
            model, tokenizer, rows, config.task, reward, config.group_size, config.temperature,
            config.max_new_tokens, config.seed,
        )  # fmt: skip
    save_rollouts(rollouts, tokenizer, out / "rollouts.jsonl")
    probe_fields = {f.name for f in fields(ProbeConfig)}
    result = run_probe(
        model, rollouts, tokenizer.pad_token_id, ProbeConfig(**{k: getattr(config, k) for k in probe_fields})
    )
    result["settings"] = {k: v for k, v in config.__dict__.items() if k not in probe_fields} | {"reward": reward}
    figures = {
        "delta_pi": plot_delta_pi(result, out / "delta_pi.png"),
        "correct_ratio": plot_correct_ratio(result, out / "correct_ratio.png"),
        "gradient_bounds": plot_gradient_bounds(result, out / "gradient_bounds.png"),
    }
    result["figures"] = {name: path.name for name, path in figures.items() if path is not None}
    (out / "analysis.json").write_text(json.dumps(result, indent=1, allow_nan=False))  # a NaN is a bug here
    (out / "summary.md").write_text(summary_markdown(result))
    return result
