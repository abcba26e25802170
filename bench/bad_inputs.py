"""Sweep `lopti train` over settings at and past their edges: each must end in one line (exit status 2) before
training, or be a value a user could mean and start training.

Each case runs `lopti train` with the default recipe and the case's flags. A case still running after `--wait`
seconds counts as accepted (it is then stopped); the others must have exited with status 2, one line on stderr
and no traceback. The script prints one line per case, the accepted ones last, and exits with status 1 when a case
ends in a traceback, in another exit status, or in more than one line. docs/guides/cli.md ("Values accepted at their
edges") says why each accepted one is. The default recipe's model is built first, outside the cases: its one-time
conversion (about 25-50 s on 2 cores) would otherwise count against the first case that reads it.

Run: python bench/bad_inputs.py   (5 to 16 minutes on 2 cores: 16 on an AVX2-only EPYC)
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

CASES = """
--temperature -1 | --temperature 0 | --temperature nan | --top_p 0 | --top_p 2 | --top_k -1 | --top_k 0 | --min_p 2
--repetition_penalty 0 | --learning_rate -1 | --learning_rate 0 | --learning_rate nan | --learning_rate inf
--max_steps 0 | --max_steps -1 | --num_train_epochs -1 | --num_generations 1 | --per_device_train_batch_size 12
--gradient_accumulation_steps 0 | --epsilon -0.1 | --epsilon 0.3 --epsilon_high 0.1 | --dual_clip 0.5
--dual_clip -1 | --beta -1 | --num_iterations 0 | --weight_decay -1 | --max_grad_norm -1 | --max_grad_norm 0
--ar_alpha -1 | --ar_alpha 5 | --ar_alpha nan | --lopti_eta 0 | --lopti_eta 1.5 | --max_weight_growth 0.5
--save_steps 0 | --save_total_limit 0 | --logging_steps 0 | --seed -1 | --data_seed -5 | --train_puzzles 0
--eval_puzzles 0 | --people 1 | --people 99 | --max_completion_length 0 | --max_completion_length 1000000000
--eval_max_new_tokens 0 | --eval_samples -1 | --eval_samples 0 | --eval_temperature -1
--eval_sampled_prompts 0 | --eval_sampled_prompts 5000 | --reward_timeout -1 | --rewards [] | --rewards nonexistent
--rewards "" | --people ""
--template foo | --task foo | --loss_type nonsense | --advantage_estimator nonsense | --lr_scheduler_type nonsense
--fixed_names maybe | --warmup_ratio 2 | --optim nonsense | --importance_sampling_level tokens
"""

# builds (once per machine) the embedded model of the recipe `lopti train` uses without --config
BUILD_DEFAULT_MODEL = """
from lopti.commands.settings import RunConfig, train_settings
from lopti.models.loading import resolve_model
resolve_model(train_settings(None, {})[0].get("model", RunConfig.model))
"""


def run_case(flags: str, wait: float, folder: str) -> tuple[str, str]:
    """Return (outcome, last stderr line) of `lopti train` with `flags`: "accepted", "one line" or "FAILED ..."."""
    command = [sys.executable, "-m", "lopti.cli", "train", "--output_dir", folder, "--report_to", "none",
               "--disable_tqdm", "true", *shlex.split(flags)]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=wait)
    except subprocess.TimeoutExpired:
        return "accepted", ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if "Traceback" in result.stderr:
        return "FAILED: traceback", last
    if result.returncode != 2 or len(lines) != 1:
        return f"FAILED: exit status {result.returncode}, {len(lines)} lines", last
    return "one line", last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", type=float, default=25, help="Seconds after which a running case is accepted.")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    subprocess.run([sys.executable, "-c", BUILD_DEFAULT_MODEL], check=True)
    cases = [case.strip() for line in CASES.strip().splitlines() for case in line.split("|")]
    outcomes = []
    with tempfile.TemporaryDirectory() as scratch:
        for number, flags in enumerate(cases):
            outcome, line = run_case(flags, args.wait, os.path.join(scratch, str(number)))
            outcomes.append((flags, outcome, line))
            if outcome != "accepted":
                print(f"{flags:40} {outcome}: {line[:200]}", flush=True)
    accepted = [flags for flags, outcome, _ in outcomes if outcome == "accepted"]
    print(f"accepted ({len(accepted)}): {' | '.join(accepted)}")
    failed = [flags for flags, outcome, _ in outcomes if outcome.startswith("FAILED")]
    print(f"{len(cases)} cases: {len(cases) - len(accepted) - len(failed)} one line, {len(accepted)} accepted, "
          f"{len(failed)} failed")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
