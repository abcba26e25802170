"""Regenerate docs/analysis/: the one-update probe on SmolLM2-135M and on the tiny model, next to the paper.

Run from the repository root (about 15 minutes on 2 CPU cores; runs already in docs/analysis/ are kept
unless --force):
    python docs/make_analysis.py --force
Writes docs/analysis/<model>/ (analysis.json, summary.md, figures, rollouts.jsonl),
docs/analysis/tables.md and docs/analysis/findings.md (each statement checked by a rule), which
docs/analysis.md quotes.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from lopti.diagnostics.analyze import AnalyzeConfig, analyze

OUT = Path(__file__).parent / "analysis"
RUNS = {
    # SmolLM2 does not write the answer tags, so the lenient reward (share of people named correctly in
    # its prose) gives the reward spread the analysis needs; T = 0.7 as in the paper. float32 weights
    # keep it to minutes (the log-softmax is float64 either way).
    "smollm2": AnalyzeConfig(
        model="smollm2-135m", people="2,3", template="chatml-think", reward="lenient", prompts=4, group_size=8,
        temperature=0.7, max_new_tokens=96, dtype="float32",
    ),
    # The warm-started tiny model on its own training distribution (3-4 people, terse form), at its RL
    # temperature; the partial reward is the one it trains with.
    "tiny": AnalyzeConfig(
        model="tiny", people="3,4", template="terse", fixed_names=True, reward="partial", prompts=16, group_size=8,
        temperature=1.0, max_new_tokens=48,
    ),
}  # fmt: skip
PAPER = {  # PAPER.md §9: Qwen2.5 on K&K, one GRPO batch, SGD lr 1e-3
    "token_share": [19.22, 10.15, 10.09, 60.54],
    "grad_norm": [0.71, 0.36, 0.24, 0.15, 0.82],
    "correct_ratio_top": {"grpo": 0.496, "ar": 0.526, "lopti": 0.534},
}


def tables(results: dict[str, dict]) -> str:
    """Return markdown tables of the headline numbers of each run next to the paper's."""
    labels = next(iter(results.values()))["buckets"]
    lines = [
        "### Token share per π_old quartile (%)",
        "",
        "| | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
        "| paper (Qwen2.5, K&K) | " + " | ".join(f"{v:.1f}" for v in PAPER["token_share"]) + " |",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * r['token_share'][k]:.1f}" for k in labels) + " |")
    lines += [
        "",
        "### Gradient norm of the loss restricted to one quartile (and to all tokens)",
        "",
        "Absolute norms depend on the model; the ratio to the all-token norm is comparable.",
        "",
        "| | " + " | ".join(labels) + " | all tokens |",
        "|---" * (len(labels) + 2) + "|",
        "| paper | " + " | ".join(f"{v:.2f} ({v / PAPER['grad_norm'][-1]:.2f})" for v in PAPER["grad_norm"]) + " |",
    ]
    for name, r in results.items():
        if r["grad_norm"]:
            norms = [r["grad_norm"][f"only {k}"] for k in labels] + [r["grad_norm"]["grpo"]]
            lines.append(f"| {name} | " + " | ".join(f"{v:.3g} ({v / norms[-1]:.2f})" for v in norms) + " |")
    lines += [
        "",
        "### Share of Σ|Â|·‖∂(−log π)/∂z‖ per quartile (%), exact and with the trainer's (1 − π) proxy",
        "",
        "| | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    for name, r in results.items():
        if not r["grad_norm"]:
            continue  # all advantages zero: nothing to share
        for key, kind in (("grad_share_exact", "exact"), ("grad_share_1_minus_pi", "(1 − π)")):
            lines.append(f"| {name}, {kind} | " + " | ".join(f"{100 * r[key][k]:.1f}" for k in labels) + " |")
    lines += [
        "",
        "### Correct ratio: share of positive-advantage tokens whose probability rose after one update",
        "",
        "| | method | " + " | ".join(labels) + " | all |",
        "|---" * (len(labels) + 3) + "|",
    ]
    for method, value in PAPER["correct_ratio_top"].items():
        lines.append(f"| paper | {method} | – | – | – | {value:.3f} | – |")
    for name, r in results.items():
        for method in ("grpo", "ar", "lopti", "ar+lopti"):
            if r["delta_pi"] and method in r["delta_pi"]:
                ratios = [r["delta_pi"][method][k]["correct_ratio"]["positive"] for k in [*labels, "all"]]
                cells = " | ".join("–" if v is None else f"{v:.3f}" for v in ratios)
                lines.append(f"| {name} | {method} | {cells} |")
    lines += [
        "",
        "### Proposition 4.2",
        "",
        "| | tokens | inside logit bounds | hidden: upper holds | hidden: lower holds | corr(‖∂h‖, 1 − π) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        b, h = r["bound"], r["bound"]["hidden"]
        corr = "–" if h["correlation_with_1_minus_pi"] is None else f"{h['correlation_with_1_minus_pi']:.3f}"
        lines.append(
            f"| {name} | {b['tokens']} | {100 * b['logits']['inside_fraction']:.2f}% | "
            f"{100 * h['upper_holds_fraction']:.2f}% | {100 * h['lower_holds_fraction']:.2f}% | {corr} |"
        )
    lines.append("")
    for name, r in results.items():
        lines.append(
            f"- {name}: {r['responses']} responses ({r['group_size']} per prompt, T={r['temperature']}), "
            f"{r['tokens']} response tokens, {r['groups_with_reward_spread']} of {r['responses'] // r['group_size']} "
            f"groups with reward spread, mean reward {r['reward_mean']:.3f}."
        )
    return "\n".join(lines) + "\n"


def findings(results: dict[str, dict]) -> str:
    """Return, per run, where it agrees with the paper's analysis and where it does not, checked by rule."""
    lines = []
    for name, r in results.items():
        labels = r["buckets"]
        share = [r["token_share"][k] for k in labels]
        lines.append(f"**{name}**")
        lines.append("")
        top_heavy = share[-1] == max(share) and share[0] > min(share[1:-1])
        lines.append(
            f"- Token shares {', '.join(f'{100 * v:.1f}%' for v in share)}: "
            + ("the paper's U shape (most tokens confident, a fat lowest quartile) — agrees."
               if top_heavy else "not the paper's U shape — differs.")
        )  # fmt: skip
        if not r["grad_norm"]:
            lines += [f"- No update was measured: {'; '.join(r['warnings'])}.", ""]
            continue
        norms = [r["grad_norm"][f"only {k}"] for k in labels]
        whole = r["grad_norm"]["grpo"]
        falling = all(a >= b for a, b in itertools.pairwise(norms))
        lines.append(
            f"- Updating only the lowest quartile ({100 * share[0]:.1f}% of tokens) gives a gradient norm "
            f"{norms[0] / whole:.2f} of the all-token one (paper 0.87), the top quartile {norms[-1] / whole:.2f} "
            f"(paper 0.18); norms {'fall' if falling else 'do not fall'} monotonically with π — "
            + ("agrees." if falling and norms[0] > norms[-1] else "differs.")
        )  # fmt: skip
        exact = r["grad_share_exact"][labels[0]]
        lines.append(
            f"- The lowest quartile carries {100 * exact:.1f}% of Σ|Â|·‖∂z‖ with {100 * share[0]:.1f}% of the tokens."
        )
        top = {m: r["delta_pi"][m][labels[-1]]["correct_ratio"]["positive"] for m in ("grpo", "ar", "lopti")}
        if None not in top.values():
            order = "AR and Lopti above GRPO" if top["ar"] > top["grpo"] and top["lopti"] > top["grpo"] else None
            lines.append(
                f"- Correct ratio of the top quartile: GRPO {top['grpo']:.3f}, AR {top['ar']:.3f}, Lopti "
                f"{top['lopti']:.3f} (paper 0.496, 0.526, 0.534): "
                + (f"{order} — agrees." if order else "not the paper's order (AR and Lopti above GRPO) — differs.")
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="redo runs whose analysis.json already exists")
    force = parser.parse_args().force
    results = {}
    for name, config in RUNS.items():
        done = OUT / name / "analysis.json"
        if done.exists() and not force:
            results[name] = json.loads(done.read_text())
            print(f"{name}: kept {done} (--force to redo)")
            continue
        results[name] = analyze(config, OUT / name)
        print(f"{name}: done", flush=True)
    (OUT / "tables.md").write_text(tables(results))
    (OUT / "findings.md").write_text(findings(results))
    print(json.dumps({name: r["warnings"] for name, r in results.items()}))


if __name__ == "__main__":
    main()
