#!/usr/bin/env bash
# The paper's K&K recipe on verl (configs/verl/kk-qwen2.5-3b.yaml): 4 GPUs, GRPO + AR (α 0.3) + Lopti (η 0.5).
# Run from the repository root; extra arguments are Hydra overrides, e.g. trainer.n_gpus_per_node=8.
set -euo pipefail
recipes="$(cd "$(dirname "$0")" && pwd)"
[ -f data/kk/train.parquet ] || lopti data kk --people 3-7 --train_puzzles 900 --eval_puzzles 100 --data_seed 0 --template chat --out data/kk
python3 -m verl.trainer.main_ppo --config-path "$recipes" --config-name kk-qwen2.5-3b "$@"
