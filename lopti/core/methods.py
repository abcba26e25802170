"""Method names: one spelling for a token-level method, shared by `lopti compare --variants` and
`lopti analyze --methods`.

A method name joins parts with "+": `grpo` alone (the plain objective), or any of `ar` (Advantage
Reweighting, docs/paper.md §4), `lopti` (the two-phase update, §5) and the token-credit presets of
`lopti.core.credit_presets` (docs/guides/token-credit.md), e.g. `ar+lopti`, `stapo`, `ar+stapo`. `entropyNN` is
the high-entropy-minority preset with ρ = NN % (`entropy20` is that paper's default). Parsing checks the
combination as the trainer's config would, so a bad name fails before any run starts.

Two controls tell what Lopti's effect comes from (`CONTROLS`); both keep Lopti's schedule, two update passes
per generated batch, and change which tokens each pass updates (`lopti_split`): `grpo2` updates every token
in both passes, `lopti_random` a random set of the sizes Lopti's split would give. They combine as `lopti`
does (`ar+lopti_random` is the control of `ar+lopti`), never with `lopti` or each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lopti.core.credit_presets import PRESETS, credit_problems

PAPER_METHODS = ("grpo", "ar", "lopti", "ar+lopti")
CONTROLS = ("grpo2", "lopti_random")
# the parts that set Lopti's two-pass schedule, and the tokens each pass updates (LoptiGRPOConfig.lopti_split)
SCHEDULES = {"lopti": "probability", "lopti_random": "random", "grpo2": "none"}
_ENTROPY_SHARE = re.compile(r"entropy(\d{1,2})")


@dataclass(frozen=True)
class MethodSpec:
    """What a method name switches on; the alpha and eta themselves come from the recipe."""

    name: str
    ar: bool = False
    lopti: bool = False  # Lopti's two-pass schedule, whatever the split
    lopti_split: str = "probability"
    token_credit: tuple[str, ...] = ()
    token_credit_kwargs: dict[str, dict[str, float]] = field(default_factory=dict)


def parse_method(name: str) -> MethodSpec:
    """Return the MethodSpec of `name`, or raise ValueError with one line saying what is wrong."""
    parts = [part.strip() for part in name.strip().lower().split("+")]
    choices = f"grpo, grpo2, ar, lopti, lopti_random, entropyNN, {', '.join(PRESETS)}, joined with '+'"
    if not name.strip() or "" in parts:
        raise ValueError(f"method {name!r}: empty part; a method is one of {choices}")
    if "grpo" in parts and len(parts) > 1:
        raise ValueError(f"method {name!r}: 'grpo' is the plain objective and combines with nothing")
    repeated = sorted({part for part in parts if parts.count(part) > 1})
    if repeated:
        raise ValueError(f"method {name!r}: {', '.join(repeated)} listed twice")
    schedules = [part for part in parts if part in SCHEDULES]
    if len(schedules) > 1:
        raise ValueError(
            f"method {name!r}: {' and '.join(schedules)} each choose the tokens of the two passes; keep one"
        )
    presets: list[str] = []
    constants: dict[str, dict[str, float]] = {}
    for part in parts:
        share = _ENTROPY_SHARE.fullmatch(part)
        if share:
            if not 0 < int(share.group(1)) < 100:
                raise ValueError(f"method {name!r}: {part} needs a share between 1 and 99 percent")
            presets.append("high_entropy")
            constants["high_entropy"] = {"rho": int(share.group(1)) / 100}
        elif part in PRESETS:
            presets.append(part)
        elif part not in ("grpo", "ar", *SCHEDULES):
            raise ValueError(f"method {name!r}: unknown part {part!r}; a method is one of {choices}")
    uses_ar = "ar" in parts
    if uses_ar and "tr_grpo" in presets:
        raise ValueError(f"method {name!r}: ar and tr_grpo both shape the weight by probability; choose one")
    problems = credit_problems(presets, constants)
    if problems:
        raise ValueError(f"method {name!r}: " + "; ".join(problems))
    return MethodSpec(
        name=name.strip(),
        ar=uses_ar,
        lopti=bool(schedules),
        lopti_split=SCHEDULES[schedules[0]] if schedules else "probability",
        token_credit=tuple(presets),
        token_credit_kwargs=constants,
    )
