"""`LoptiGRPOConfig`: TRL's `GRPOConfig` plus the paper's switches (docs/paper.md §4–§5)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from trl import GRPOConfig

from lopti.core import ESTIMATORS, KL_ESTIMATORS, ORDERS, PRESETS, SPLITS, credit_problems
from lopti.core.buckets import QUARTILES, check_edges
from lopti.core.constants import DUAL_CLIP, LOPTI_ETA
from lopti.errors import SettingError, UserError, check_number, check_output_folder, check_report_to
from lopti.train.guards import GROWTH_LIMIT

# TRL loss types that lopti's objective computes exactly as GRPOTrainer does, whatever lopti's settings.
SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
# TRL loss types that lopti's objective also computes, so that they compose with AR, Lopti and the KL estimators
# (docs/guides/trl.md): LUSPO with the clipped surrogate, CISPO and SAPO with their own per-token surrogates.
COMPOSING_LOSS_TYPES = ("luspo", "cispo", "sapo")


@dataclass
class LoptiGRPOConfig(GRPOConfig):
    """Configuration for `LoptiGRPOTrainer`. Every `GRPOConfig` field keeps its meaning.

    The loss is computed by `lopti.core`, so TRL options that change the surrogate (sequence-level
    importance sampling, CISPO/SAPO/VESPO/LUSPO, entropy masks, off-policy masks, adaptive entropy) are
    rejected here instead of being silently ignored.
    """

    ar_alpha: float = field(
        default=0.0,
        metadata={
            "help": "Advantage Reweighting α in [0, 1]: each token's advantage is scaled by α·π_old + (1 − α). "
            "0 disables it. The paper's value depends on the task: each task's `ar_alpha` (docs/paper.md §4, §8)."
        },
    )
    lopti: bool = field(
        default=False,
        metadata={
            "help": "Low-Probability Token Isolation: update on tokens with π_old < lopti_eta first, then on the "
            "rest from the updated weights. Needs num_iterations=2 (one pass per group)."
        },
    )
    lopti_eta: float = field(
        default=LOPTI_ETA, metadata={"help": "Lopti probability threshold η in (0, 1); low tokens have π_old < η."}
    )
    lopti_order: str = field(
        default="low_first",
        metadata={"help": "'low_first' (the paper's method) or 'high_first' (its ablation, worse than GRPO)."},
    )
    lopti_split: str = field(
        default="probability",
        metadata={
            "help": "Which tokens each Lopti pass updates. 'probability': π_old < lopti_eta, then the rest (the "
            "paper's method). Two controls on the same schedule: 'random': in each micro-batch a random set of as "
            "many tokens as 'probability' puts in pass 1, then the rest, drawn from the seed and the RL step "
            "(lopti compare's lopti_random); 'none': every token in both passes (GRPO with two passes per "
            "generated batch, lopti compare's grpo2). Needs lopti=True."
        },
    )
    advantage_estimator: str | None = field(
        default=None,
        metadata={
            "help": "None keeps TRL's advantages (scale_rewards etc.). 'grpo' is the paper's (std + 1e-6); also "
            "'dr_grpo', 'rloo', 'reinforce_pp' (batch-whitened outcome return) and 'reinforce_pp_baseline'."
        },
    )
    dual_clip: float | None = field(
        default=None,
        metadata={
            "help": f"Dual-clip constant c > 1 for negative advantages (the paper uses {DUAL_CLIP:g}); None disables."
        },
    )
    kl_estimator: str = field(
        default="k3",
        metadata={"help": "KL penalty estimator when beta > 0: 'k1', 'k2' or 'k3' (low-var KL)."},
    )
    use_bias_correction_kl: bool = field(
        default=False,
        metadata={
            "help": "Multiply the KL term by π/π_old (TRL's DeepSeek-V3.2 correction, which changes the KL gradient "
            "even on-policy). Off by default, unlike GRPOConfig: the paper's KL (docs/paper.md §2) and the authors' "
            "are the plain estimate."
        },
    )
    probability_buckets: list[float] = field(
        default_factory=lambda: list(QUARTILES),
        metadata={
            "help": "Edges of the π_old buckets of the per-step metrics probs/share_* and probs/grad_share_* "
            "(docs/paper.md §9 uses quartiles: 0, 0.25, 0.5, 0.75, 1)."
        },
    )
    token_credit: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Per-token credit presets applied after AR and Lopti, in order (docs/guides/token-credit.md): "
            f"{', '.join(PRESETS)}. A comma- or plus-separated string is split. Constants default to each "
            "paper's; set them in token_credit_kwargs. Pass your own steps as LoptiGRPOTrainer(token_credit=...)."
        },
    )
    token_credit_kwargs: dict[str, dict[str, float]] | str | None = field(
        default_factory=dict,
        metadata={
            "help": "Constants of the token_credit presets by preset name, e.g. {'stapo': {'prob_threshold': 0.02}, "
            "'high_entropy': {'rho': 0.1}} (a JSON string on the command line)."
        },
    )
    update_quality_every: int = field(
        default=0,
        metadata={
            "help": "Every K-th RL step (generated batch), after its update, one extra forward pass over the same "
            "batch logs per π_old bucket (probability_buckets) and for all tokens: quality/correct_pos_* and "
            "quality/correct_neg_* (share of tokens with Â > 0 whose log π rose, with Â < 0 whose log π fell) and "
            "quality/dlogp_pos_*, quality/dlogp_neg_* (their mean Δ log π); with Lopti also quality/phase1/* "
            "after phase 1's update alone (a second extra forward). 0 (default) turns it off."
        },
    )
    max_nonfinite_losses: int = field(
        default=3,
        metadata={
            "help": "Stop training after this many optimizer steps in a row whose update was skipped for a "
            "non-finite loss or reward (each such step is skipped: lopti.train.guards)."
        },
    )
    max_weight_growth: float | None = field(
        default=GROWTH_LIMIT,
        metadata={
            "help": "Stop training, before the step's checkpoint is saved, when after an optimizer step the trainable "
            "weights' norm is not finite or exceeds this multiple of its value at the start of training (a learning "
            f"rate far too high; legitimate RL updates change it far less). Default {GROWTH_LIMIT:g}; must be > 1. "
            "None switches the check off (e.g. for training from scratch, where the norm may grow legitimately)."
        },
    )

    reward_errors: Literal["stop", "skip"] = field(
        default="stop",
        metadata={
            "help": "What a reward function that raises does: 'stop' ends the run with one line naming the "
            "function, the exception and the completion; 'skip' scores that sample as no reward (TRL's None) and "
            "counts it in the reward_errors metric (lopti.train.reward_calls)."
        },
    )
    reward_timeout: float = field(
        default=0.0,
        metadata={
            "help": "Seconds one call of a reward function may take before the run stops with one line naming "
            "it; 0 = no limit."
        },
    )

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOConfig._VALID_DICT_FIELDS, "token_credit_kwargs"]
    # Bounds of TRL / transformers fields that neither library checks, refused in `__post_init__`: out of them a run
    # failed late (a traceback once the model was built) or silently (a run that trains nothing). Bounds the libraries
    # check (warmup_steps ≥ 0, ...) are theirs. num_generations is here although TRL checks it, because the batch-shape
    # message below divides by it first. tests/commands/test_trainer_bounds.py fails when a TRL or transformers
    # release starts checking one of these, so that it can leave this table. None (unset) is never checked.
    TRL_BOUNDS: ClassVar[dict[str, dict[str, object]]] = {
        "learning_rate": {"low": 0},
        "num_generations": {"low": 2},
        "per_device_train_batch_size": {"low": 1},
        "per_device_eval_batch_size": {"low": 1},
        "gradient_accumulation_steps": {"low": 1},
        "steps_per_generation": {"low": 1},
        "generation_batch_size": {"low": 1},
        "num_iterations": {"low": 1},
        "max_steps": {"low": 1, "allowed": (-1,)},
        "num_train_epochs": {"above": 0},
        "beta": {"low": 0},
        "max_completion_length": {"low": 1},
        "temperature": {"above": 0},
        "top_p": {"above": 0, "high": 1},
        "top_k": {"low": 0},  # 0: off (TRL's default)
        "min_p": {"low": 0, "high": 1},
        "repetition_penalty": {"above": 0},
        "epsilon": {"low": 0},
        "epsilon_high": {"low": 0},
        "max_grad_norm": {"low": 0},
        "weight_decay": {"low": 0},
        "logging_steps": {"above": 0},
        "save_steps": {"above": 0},
        "eval_steps": {"above": 0},
        "save_total_limit": {"low": 1},
        "seed": {"low": 0, "high": 2**32 - 1},  # numpy's limit
        "data_seed": {"low": 0},
    }
    _argument_group_name = (
        "LoptiGRPOConfig (lopti): how to train, on TRL's GRPOConfig and transformers' TrainingArguments"
    )

    @classmethod
    def check_values(cls, values: dict[str, Any], reward_count: int | None = None) -> None:
        """Refuse a value of `values` (settings by key) outside `TRL_BOUNDS`, an unwritable output_dir, an unknown or
        missing report_to and reward_weights not one per reward function (`reward_count`; TRL counts them only once
        the model is loaded): `lopti train` and a study check a run's settings before any config is built."""
        for key, bounds in cls.TRL_BOUNDS.items():
            if values.get(key) is not None:
                check_number(key, values[key], **bounds)
        weights = values.get("reward_weights")
        if reward_count is not None and weights is not None and len(weights) != reward_count:
            counts = f"reward_weights has {len(weights)} entries but rewards has {reward_count}"
            raise SettingError("reward_weights", counts)
        level = values.get("importance_sampling_level", "token")
        if level not in ("token", "sequence"):
            raise SettingError(
                "importance_sampling_level", f"importance_sampling_level must be one of token, sequence, got {level!r}"
            )
        if values.get("output_dir") is not None:
            check_output_folder(values["output_dir"], "output_dir")
        check_report_to(values.get("report_to"))  # transformers would fail only once the model is loaded

    def __post_init__(self) -> None:
        self.check_values(vars(self))
        if isinstance(self.token_credit, str):  # `--token_credit stapo+high_entropy` on the command line
            self.token_credit = [
                name.strip() for name in self.token_credit.replace("+", ",").split(",") if name.strip()
            ]
        if self.token_credit_kwargs is None:
            self.token_credit_kwargs = {}
        shape = self._batch_shape_problem()  # before TRL's own check, to show the whole arithmetic
        if shape:
            raise UserError(f"invalid LoptiGRPOConfig: {shape}")
        super().__post_init__()
        problems = self.lopti_problems()
        if problems:
            raise UserError("invalid LoptiGRPOConfig: " + "; ".join(problems))

    def _batch_shape_problem(self) -> str | None:
        if self.generation_batch_size is not None:
            completions, arithmetic = self.generation_batch_size, "generation_batch_size"
        else:
            steps = self.steps_per_generation or self.gradient_accumulation_steps
            processes = int(os.environ.get("WORLD_SIZE", "1"))  # TRL's world_size is not set up yet
            completions = self.per_device_train_batch_size * processes * steps
            arithmetic = (
                f"per_device_train_batch_size {self.per_device_train_batch_size} × {processes} process(es) "
                f"× steps_per_generation {steps}"
            )
        if completions % self.num_generations == 0:
            return None
        return (
            f"each generated batch must hold whole groups of num_generations={self.num_generations} completions, "
            f"but {arithmetic} = {completions}; make it a multiple of {self.num_generations}"
        )

    def lopti_problems(self) -> list[str]:
        """Return every setting that lopti cannot honour, each with what to do instead."""
        problems = []
        if not 0.0 <= self.ar_alpha <= 1.0:
            problems.append(f"ar_alpha must be in [0, 1], got {self.ar_alpha}")
        if not 0.0 < self.lopti_eta < 1.0:
            problems.append(f"lopti_eta must be in (0, 1), got {self.lopti_eta}")
        try:
            check_edges(self.probability_buckets)
        except ValueError as error:
            problems.append(f"probability_buckets: {error}")
        if self.lopti_order not in ORDERS:
            problems.append(f"lopti_order must be one of {ORDERS}, got {self.lopti_order!r}")
        if self.lopti_split not in SPLITS:
            problems.append(f"lopti_split must be one of {SPLITS}, got {self.lopti_split!r}")
        elif self.lopti_split != "probability" and not self.lopti:
            problems.append(
                f"lopti_split={self.lopti_split!r} chooses the tokens of Lopti's two passes, so it needs lopti=True"
            )
        if self.advantage_estimator is not None and self.advantage_estimator not in ESTIMATORS:
            problems.append(
                f"advantage_estimator must be None or one of {ESTIMATORS}, got {self.advantage_estimator!r}"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            problems.append(f"dual_clip must be > 1 or None, got {self.dual_clip}")
        if self.kl_estimator not in KL_ESTIMATORS:
            problems.append(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        problems += self._update_quality_problems()
        if self.reward_errors not in ("stop", "skip"):
            problems.append(f"reward_errors must be 'stop' or 'skip', got {self.reward_errors!r}")
        if not self.reward_timeout >= 0:
            problems.append(f"reward_timeout must be ≥ 0, got {self.reward_timeout}")
        if self.max_nonfinite_losses < 1:
            problems.append(f"max_nonfinite_losses must be ≥ 1, got {self.max_nonfinite_losses}")
        if self.max_weight_growth is not None and not self.max_weight_growth > 1.0:
            problems.append(f"max_weight_growth must be > 1 or None (no check), got {self.max_weight_growth}")
        if not isinstance(self.token_credit_kwargs, dict):
            problems.append(f"token_credit_kwargs must map preset names to constants, got {self.token_credit_kwargs!r}")
        else:
            problems += credit_problems(self.token_credit, self.token_credit_kwargs, self.ar_alpha)
        problems += self.trl_option_problems()
        if self.lopti:
            problems += self._lopti_schedule_problems()
        return problems

    def lopti_loss_features(self, credit_steps: bool = False) -> list[str]:
        """Return lopti's settings that change the loss from GRPOTrainer's, as `name=value`; `credit_steps`: the
        trainer was given credit steps of its own. `advantage_estimator` is not one: it changes the advantages,
        which GRPOTrainer's loss takes per token as they come."""
        features = [f"ar_alpha={self.ar_alpha}"] if self.ar_alpha > 0 else []
        features += ["lopti=True"] if self.lopti else []
        features += ["token_credit"] if self.token_credit or credit_steps else []
        features += [f"dual_clip={self.dual_clip}"] if self.dual_clip is not None else []
        features += [f"kl_estimator={self.kl_estimator!r}"] if self.beta != 0.0 and self.kl_estimator != "k3" else []
        return features

    def trl_computes_loss(self, credit_steps: bool = False) -> bool:
        """Return True when GRPOTrainer's own `_compute_loss` computes the loss: lopti's loss features are off and a
        TRL option asks for more than the loss types lopti's objective computes exactly as TRL does."""
        asks_more = self.loss_type not in SUPPORTED_LOSS_TYPES or bool(self._trl_only_options())
        return asks_more and not self.lopti_loss_features(credit_steps)

    def trl_option_problems(self, credit_steps: bool = False) -> list[str]:
        """Return one line per TRL loss option that does not compose with lopti's loss features, saying why."""
        features = self.lopti_loss_features(credit_steps)
        if not features:
            return []
        problems = [f"{option} does not compose with {', '.join(features)}: {why}"
                    for option, why in self._trl_only_options().items()]  # fmt: skip
        if self.loss_type in ("cispo", "sapo"):
            if self.dual_clip is not None:
                problems.append(
                    f"loss_type={self.loss_type!r} does not compose with dual_clip: the dual clip caps the clipped "
                    "surrogate's ratio, which this loss type replaces with its own bound"
                )
            if self.token_credit or credit_steps:
                problems.append(
                    f"loss_type={self.loss_type!r} does not compose with token_credit: credit steps are given the "
                    "clipped surrogate's ε (clip_cov selects by its clip); use loss_type "
                    f"{' or '.join(repr(name) for name in (*SUPPORTED_LOSS_TYPES, 'luspo'))}"
                )
        elif self.loss_type not in (*SUPPORTED_LOSS_TYPES, *COMPOSING_LOSS_TYPES, "vespo"):
            problems.append(f"loss_type {self.loss_type!r} is not one lopti's objective computes")
        return problems

    def _trl_only_options(self) -> dict[str, str]:
        """Return {option: why lopti's objective cannot compute it} for each TRL option set that only
        GRPOTrainer's own loss computes."""
        options = {}
        if self.loss_type == "vespo":
            options["loss_type='vespo'"] = (
                "VESPO weighs each response by a gamma function of its whole-sequence ratio, a term lopti's per-token "
                "objective does not have"
            )
        if self.importance_sampling_level != "token":
            options[f"importance_sampling_level={self.importance_sampling_level!r}"] = (
                "all tokens of a response share its one ratio and clip, so AR's per-token weights act as one weight "
                "per response and Lopti's split does not keep the other tokens' gradients out"
            )
        if self.delta is not None:
            options[f"delta={self.delta}"] = (
                f"lopti's objective has TRL's two-sided clip as its dual clip: set dual_clip={self.delta} instead "
                "(the same loss where delta > 1 + epsilon_high)"
            )
        if self.top_entropy_quantile < 1.0:
            options[f"top_entropy_quantile={self.top_entropy_quantile}"] = (
                f"use lopti's entropy mask, token_credit=['high_entropy'] with "
                f"token_credit_kwargs={{'high_entropy': {{'rho': {self.top_entropy_quantile}}}}}, instead"
            )
        if self.off_policy_mask_threshold is not None:
            options[f"off_policy_mask_threshold={self.off_policy_mask_threshold}"] = (
                "TRL drops responses by their sequence-level KL inside its own loss, which lopti's objective replaces"
            )
        if self.use_adaptive_entropy:
            options["use_adaptive_entropy=True"] = (
                "TRL's entropy controller runs inside its own loss, which lopti's objective replaces; use a fixed "
                "entropy_coef"
            )
        return options

    def _update_quality_problems(self) -> list[str]:
        if self.update_quality_every < 0:
            return [f"update_quality_every must be ≥ 0 (0 = off), got {self.update_quality_every}"]
        passes = self.steps_per_generation * self.num_iterations
        if self.update_quality_every and passes % self.gradient_accumulation_steps != 0:
            return [
                f"update_quality_every needs each generated batch to end on an optimizer step: steps_per_generation "
                f"({self.steps_per_generation}) × num_iterations ({self.num_iterations}) must be a multiple of "
                f"gradient_accumulation_steps ({self.gradient_accumulation_steps})"
            ]
        return []

    def _lopti_schedule_problems(self) -> list[str]:
        problems = []
        if self.num_iterations != 2:
            problems.append(
                f"lopti=True needs each generated batch used for exactly two update passes (one on low-, one on "
                f"high-probability tokens): set num_iterations=2 (got {self.num_iterations})"
            )
        if self.steps_per_generation % self.gradient_accumulation_steps != 0:
            problems.append(
                f"lopti=True needs each pass to end on an optimizer step: steps_per_generation "
                f"({self.steps_per_generation}) must be a multiple of gradient_accumulation_steps "
                f"({self.gradient_accumulation_steps})"
            )
        cycle = 2 * self.steps_per_generation // max(self.gradient_accumulation_steps, 1)
        if self.save_strategy == "steps" and self.save_steps >= 1 and self.save_steps % cycle != 0:  # < 1: a share
            problems.append(
                f"with lopti=True a checkpoint must fall between two generated batches, so that a resumed run "
                f"starts a fresh batch in phase 1: save_steps ({self.save_steps}) must be a multiple of "
                f"2 × steps_per_generation / gradient_accumulation_steps = {cycle}"
            )
        return problems
