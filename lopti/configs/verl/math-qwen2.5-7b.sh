#!/usr/bin/env bash
# Math with AR (α 0.1) on verl (configs/verl/math-qwen2.5-7b.yaml), 4 GPUs. Needs data/deepscaler/train.parquet
# and data/math500/test.parquet in verl's schema; extra arguments are Hydra overrides.
set -euo pipefail
recipes="$(cd "$(dirname "$0")" && pwd)"
python3 -m verl.trainer.main_ppo --config-path "$recipes" --config-name math-qwen2.5-7b "$@"
