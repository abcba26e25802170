"""The probe's settings (`ProbeConfig`): how `lopti analyze` updates, which methods and optimizer regimes it
compares; lopti/diagnostics/probe.py measures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from lopti.core.buckets import QUARTILES, check_edges
from lopti.core.constants import EPS_HIGH, EPS_LOW, LOPTI_ETA
from lopti.core.methods import PAPER_METHODS, parse_method

OPTIMIZERS = ("sgd", "adamw", "adamw_warm")


def _names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Return a comma-separated string (as the command line passes it) or a sequence as a tuple of names."""
    return tuple(v.strip() for v in value.split(",")) if isinstance(value, str) else tuple(value)


@dataclass
class ProbeConfig:
    """How the probe updates. The paper's analysis: SGD, lr 1e-3, probability quartiles. The AdamW settings
    default to those of the embedded recipe (lopti/configs/kk-tiny-cpu.yaml); `lopti analyze --config` takes
    them, and the method settings, from another recipe or run config (`RUN_KEYS`: the LoptiGRPOConfig key each
    one mirrors)."""

    edges: list[float] = field(
        default_factory=lambda: list(QUARTILES),
        metadata={"help": "Edges of the π_old buckets, from 0 to 1 (the paper: quartiles)."},
    )
    optimizers: list[str] = field(
        default_factory=lambda: ["sgd"],
        metadata={
            "help": "Optimizer regimes of the one update: sgd (the paper's analysis), adamw (the trainer's AdamW, "
            "fresh state), adamw_warm (the same after warmup_updates RL updates on other batches)."
        },
    )
    lr: float = field(default=1e-3, metadata={"help": "Learning rate of the sgd regime (the paper's: 1e-3)."})
    adam_lr: float = field(default=1e-4, metadata={"help": "Learning rate of the AdamW regimes."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW's β1."})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW's β2."})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW's ε."})
    weight_decay: float = field(
        default=0.01,
        metadata={
            "help": "AdamW's weight decay, on the weights the 🤗 Trainer decays (not biases or norms).",
        },
    )
    max_grad_norm: float = field(
        default=1.0,
        metadata={
            "help": "The AdamW regimes clip the gradient norm to this, as the trainer does; 0 turns it off.",
        },
    )
    warmup_updates: int = field(
        default=3,
        metadata={"help": "adamw_warm: RL updates of the same method, one per other batch, before the probed one."},
    )
    # the method settings, as LoptiGRPOConfig names them; `lopti analyze --config` takes a run's
    # no default of its own: the best α depends on the task, and the probe alone does not know the rollouts' task
    ar_alpha: float | None = field(
        default=None,
        metadata={
            "help": "AR's α for the methods with AR (ar, ar+lopti, ...); null, or 0 (a GRPO run's config): the "
            "task's own (its Task record's ar_alpha), as in lopti compare.",
        },
    )
    lopti_eta: float = field(
        default=LOPTI_ETA,
        metadata={"help": "Lopti's probability threshold η."},
    )
    epsilon: float = field(default=EPS_LOW, metadata={"help": "Lower clip range ε of the surrogate."})
    epsilon_high: float | None = field(
        default=EPS_HIGH,
        metadata={"help": "Upper clip range of the surrogate; null: epsilon."},
    )
    # None, LoptiGRPOConfig's default: the probe's first step is at ratio 1, so no clip binds there
    dual_clip: float | None = field(
        default=None,
        metadata={
            "help": "Dual-clip constant c for negative advantages; null: none. Binds only above ratio c, which one "
            "update (Lopti: two, the second on tokens of π_old ≥ lopti_eta) does not reach for c > 1 / lopti_eta.",
        },
    )
    micro_batch: int = field(default=4, metadata={"help": "Responses per forward/backward pass."})
    packed: bool = field(
        default=True,
        metadata={
            "help": "Run each distinct prompt of a micro-batch once, followed by all its responses (lopti/core/"
            "packing.py): the same log-probs up to float rounding, far fewer tokens when responses share prompts."
        },
    )
    methods: list[str] = field(
        default_factory=lambda: list(PAPER_METHODS),
        metadata={
            "help": "Methods whose update is compared, as `lopti compare --variants` names them: grpo, ar, lopti, "
            "the credit presets (stapo, high_entropy, entropyNN, clip_cov, kl_cov, w_reinforce, tr_grpo, stare) "
            "and their combinations with '+' (ar+lopti, ar+stapo); docs/guides/token-credit.md."
        },
    )
    # One small step moves a confident token's log π by ~1e-9. The log-softmax is always taken in float64;
    # float64 weights also remove the float32 rounding of the logits themselves (~2× slower on a CPU).
    dtype: str = field(default="float64", metadata={"help": "Weights' dtype: float64 (exact) or float32 (faster)."})
    RUN_KEYS: ClassVar[dict[str, str]] = {
        "adam_lr": "learning_rate",
        **{name: name for name in ("adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm")},
        **{name: name for name in ("ar_alpha", "lopti_eta", "epsilon", "epsilon_high", "dual_clip")},
    }

    def check(self) -> None:
        """Raise a ValueError naming the first bad setting."""
        self.edges = check_edges(self.edges)
        self.optimizers, self.methods = _names(self.optimizers), _names(self.methods)
        unknown = [n for n in self.optimizers if n not in OPTIMIZERS]
        if unknown or not self.optimizers:
            problem = f"unknown {', '.join(unknown)}" if unknown else "none given"
            raise ValueError(f"optimizers: {problem}; choose from {', '.join(OPTIMIZERS)}")
        if not self.methods:
            raise ValueError(f"methods: none given; choose from {', '.join(PAPER_METHODS)} or a credit preset")
        for name in self.methods:
            try:
                spec = parse_method(name)
            except ValueError as error:
                raise ValueError(f"methods: {error}") from None
            if spec.lopti_split != "probability":  # what they control for shows only over training
                raise ValueError(
                    f"methods: {name.strip()} is a training control of `lopti compare` (Lopti's two passes on "
                    "other tokens); the probe compares one update of grpo, ar, lopti and the credit presets"
                )
        self.methods = tuple(name.strip().lower() for name in self.methods)  # result keys: one spelling
        repeated = sorted({n for n in self.methods if self.methods.count(n) > 1})
        if repeated:
            raise ValueError(f"methods: {', '.join(repeated)} listed twice")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.lr <= 0 or self.adam_lr <= 0 or self.micro_batch < 1:
            raise ValueError(
                f"lr, adam_lr and micro_batch must be positive, got {self.lr}, {self.adam_lr} and {self.micro_batch}"
            )
        if not 0.0 <= (self.ar_alpha or 0.0) <= 1.0 or not 0.0 < self.lopti_eta < 1.0:
            raise ValueError(
                f"ar_alpha must be in [0, 1] and lopti_eta in (0, 1), got {self.ar_alpha}, {self.lopti_eta}"
            )
        high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        if self.epsilon < 0 or high < 0 or (self.dual_clip is not None and self.dual_clip <= 1.0):
            raise ValueError(
                f"epsilon and epsilon_high must be ≥ 0 and dual_clip > 1 or null, got {self.epsilon}, "
                f"{self.epsilon_high} and {self.dual_clip}"
            )
        if "adamw_warm" in self.optimizers and self.warmup_updates < 1:
            raise ValueError(f"optimizer adamw_warm needs warmup_updates ≥ 1, got {self.warmup_updates}")
        if not self.ar_alpha and (uses_ar := [name for name in self.methods if parse_method(name).ar]):
            raise ValueError(f"methods: {', '.join(uses_ar)} need ar_alpha above 0 (lopti analyze takes the task's)")
