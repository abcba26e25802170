"""The run folder's README.md: lopti's model card, in place of TRL's generic one.

TRL's trainers write a card into output_dir at every checkpoint (`GRPOTrainer._save_checkpoint` calls
`create_model_card`) that knows neither the base model of a local folder ("a fine-tuned version of
[None]") nor the method, and shows a chat example about time machines. lopti's card says what was
trained from what, with which method and settings, how it scores on the held-out set, and how to load it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from transformers import SchedulerType, TrainerCallback

from lopti.commands.report import eval_table
from lopti.models.loading import EMBEDDED_MODELS

if TYPE_CHECKING:
    from lopti.commands.settings import RunConfig
    from lopti.tasks.task import Task
    from lopti.train.config import LoptiGRPOConfig

ESTIMATOR_NAMES = {
    None: "GRPO",
    "grpo": "GRPO",
    "dr_grpo": "Dr. GRPO",
    "rloo": "RLOO",
    "reinforce_pp": "REINFORCE++",
    "reinforce_pp_baseline": "REINFORCE++ with baseline",
}
ORDER_WORDS = {"low_first": "low-probability tokens first", "high_first": "high-probability tokens first"}


def method_line(args: LoptiGRPOConfig) -> str:
    """Return the method and settings, like "GRPO + AR (α = 0.3) + Lopti (η = 0.5, low-probability tokens first)"."""
    parts = [ESTIMATOR_NAMES.get(args.advantage_estimator, args.advantage_estimator)]
    if args.ar_alpha > 0:
        parts.append(f"AR (α = {args.ar_alpha:g})")
    order = ORDER_WORDS.get(args.lopti_order, args.lopti_order)
    if args.lopti and args.lopti_split == "none":
        parts.append("two update passes per batch on every token (Lopti's control)")
    elif args.lopti and args.lopti_split == "random":
        parts.append(f"Lopti's schedule on a random token split (the sizes of η = {args.lopti_eta:g}, {order})")
    elif args.lopti:
        parts.append(f"Lopti (η = {args.lopti_eta:g}, {order})")
    return " + ".join(parts)


def base_model_words(model: str) -> str:
    """Return how the card names the base model: embedded models are lopti's, anything else as given."""
    if model in EMBEDDED_MODELS:
        return f"`{model}` (embedded in lopti, built on first use: `lopti.models.embedded`)"
    return f"`{model}`"


def is_hub_id(model: str) -> bool:
    """Return True for an "org/name" hub id that is not a local folder (the card's `base_model` metadata)."""
    return model not in EMBEDDED_MODELS and model.count("/") == 1 and not Path(model).expanduser().exists()


def task_words(run: RunConfig, task: Task) -> str:
    """Return the task and its data in one line."""
    data = task.describe_data(run.task_data())
    return f"{run.task} ({data}; template `{task.prompt_template(run)}`; rewards {', '.join(run.reward_names(task))})"


def settings_table(run: RunConfig, task: Task, args: LoptiGRPOConfig) -> str:
    """Return the run's method settings as a markdown table."""
    prompts = args.generation_batch_size // args.num_generations
    split = "" if args.lopti_split == "probability" else f", split `{args.lopti_split}`"
    clip = f"ε {args.epsilon:g}" + (f" / {args.epsilon_high:g}" if args.epsilon_high is not None else "")
    rows = {
        "base model": base_model_words(run.model),
        "task": task_words(run, task),
        "method": method_line(args),
        "advantage estimator": f"`{args.advantage_estimator}`" if args.advantage_estimator else "TRL's",
        "AR α": f"{args.ar_alpha:g}" + (" (off)" if args.ar_alpha == 0 else ""),
        "Lopti": f"η = {args.lopti_eta:g}, order `{args.lopti_order}`{split}" if args.lopti else "off",
        "learning rate": f"{args.learning_rate:g} ({SchedulerType(args.lr_scheduler_type).value} schedule)",
        "optimizer steps": str(args.max_steps) if args.max_steps > 0 else f"{args.num_train_epochs:g} epochs",
        "generated batch": f"{prompts} prompts × {args.num_generations} completions",
        "clipping": clip + (f", dual clip {args.dual_clip:g}" if args.dual_clip else ""),
        "KL β": f"{args.beta:g}",
        "LoRA": f"rank {run.lora_r}" if run.lora_r > 0 else "off (all weights trained)",
        "seed": str(args.seed),
    }
    return "\n".join(["| setting | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows.items())])


def model_card(
    run_dir: Path, run: RunConfig, task: Task, args: LoptiGRPOConfig, before: dict | None, after: dict | None
) -> str:
    """Return the model card of the run in `run_dir`: metadata, method, held-out table, how to load."""
    # with LoRA, final/ holds the adapter, which peft loads on top of its base model
    library, model_class = (
        ("peft", "AutoPeftModelForCausalLM") if run.lora_r > 0 else ("transformers", "AutoModelForCausalLM")
    )
    metadata: dict[str, Any] = {
        "library_name": library,
        "pipeline_tag": "text-generation",
        "tags": ["lopti", "grpo", "reinforcement-learning", "trl"],
    }
    if is_hub_id(run.model):
        metadata["base_model"] = run.model
    final = run_dir / "final"
    parts = [
        f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---",
        "",
        f"# {run_dir.name}",
        "",
        f"`{run.model}` trained on the `{run.task}` task with {method_line(args)}, by lopti: RL for LLMs with "
        "Advantage Reweighting and Low-Probability Token Isolation "
        "([arXiv:2505.12929](https://arxiv.org/abs/2505.12929)). The weights are in `final/`; `config.yaml` "
        "holds every setting, `report.md` the training curves.",
        "",
        "## Method and settings",
        "",
        settings_table(run, task, args),
        "",
    ]
    if before is not None and after is not None:
        parts += [
            f"## Held-out accuracy (greedy, {after['overall']['n']} prompts never seen in training)",
            "",
            eval_table(before, after),
            "",
        ]
    elif before is not None:
        parts += [f"Held-out accuracy before RL: {100 * before['overall']['accuracy']:.1f}% (greedy).", ""]
    parts += [
        "## Use",
        "",
        "```python",
        "from transformers import AutoTokenizer",
        f"from {library} import {model_class}",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{final}")',
        f'model = {model_class}.from_pretrained("{final}")',
        "```",
        "",
        f"Prompts take the task's `{task.prompt_template(run)}` template, as in training. To measure the model again:",
        f"`lopti eval --model {final} --config {run_dir / 'config.yaml'}`.",
        "",
    ]
    return "\n".join(parts)


def write_model_card(run_dir: Path, run: RunConfig, task: Task, args: LoptiGRPOConfig) -> Path:
    """Write README.md in `run_dir`, with the held-out results found there; return its path."""
    evals = [run_dir / "eval_before.json", run_dir / "eval_after.json"]
    before, after = (json.loads(path.read_text()) if path.exists() else None for path in evals)
    path = run_dir / "README.md"
    path.write_text(model_card(run_dir, run, task, args, before, after))
    return path


class LoptiModelCard(TrainerCallback):
    """Write lopti's card over the one TRL writes into output_dir at every checkpoint (`on_save` follows it)."""

    def __init__(self, run: RunConfig, task: Task) -> None:
        self.run, self.task = run, task

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            write_model_card(Path(args.output_dir), self.run, self.task, args)
