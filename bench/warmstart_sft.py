"""Step time of the warm start's SFT (lopti/tasks/kk/warmstart.py), with and without TRL's padding_free, side by side.

Report only: the warm start recipe is not changed (it defines the default model). Each round trains `--steps`
steps of the warm start's data and settings from tiny-base, once per variant in a rotating order; the first
step of each run (warm-up) is dropped. Reports seconds per step, real (non-padding) tokens per second, the
update's FLOP/s (6 · parameters · real tokens) against the matmul peak, and whether the two variants' losses
agree step by step (padding_free is a pure speed-up only if they do). Both variants set max_length=None, which
padding_free requires; the warm start's examples (about 100 tokens) are far below its default 1024, so no
example is cut either way.

Run: python bench/warmstart_sft.py --rounds 2 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import time

from step_time import matmul_peak  # bench/ is the script's folder, so on sys.path
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

from lopti.models.loading import resolve_model
from lopti.tasks.kk.warmstart import WarmStartConfig, sft_dataset


class Clock(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(time.perf_counter() - self.started)


def one_run(base: str, dataset, padding_free: bool, steps: int) -> dict:
    """Train `steps` SFT steps with the warm start's settings; return step times, real tokens and losses."""
    config = WarmStartConfig()
    args = SFTConfig(
        output_dir=f"/tmp/lopti-bench/sft-{padding_free}", max_steps=steps, learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size, warmup_steps=config.warmup_ratio, lr_scheduler_type="cosine",
        weight_decay=0.01, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0,
        completion_only_loss=True, disable_tqdm=True, padding_free=padding_free, max_length=None,
    )  # fmt: skip
    clock = Clock()
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(base),
        callbacks=[clock],
    )
    tokens: list[int] = []
    compute_loss = trainer.compute_loss

    def counting(model, inputs, *rest, **kwargs):
        mask = inputs.get("attention_mask")
        tokens.append(int(mask.sum()) if mask is not None else inputs["input_ids"].numel())
        return compute_loss(model, inputs, *rest, **kwargs)

    trainer.compute_loss = counting
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"seconds": clock.steps[1:], "tokens": tokens[1:], "losses": losses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    base = resolve_model("tiny-base")
    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(base).parameters())
    dataset = sft_dataset(WarmStartConfig())
    peak = matmul_peak()
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(args.rounds):
        for padding_free in (False, True) if r % 2 == 0 else (True, False):
            runs[padding_free].append(one_run(base, dataset, padding_free, args.steps))
            median = statistics.median(runs[padding_free][-1]["seconds"])
            print(f"round {r} padding_free={padding_free}: {median:.3f} s/step", flush=True)
    for padding_free, results in runs.items():
        seconds = statistics.median(s for res in results for s in res["seconds"])
        tokens = statistics.median(t for res in results for t in res["tokens"])
        flops = 6 * params * tokens / seconds
        print(
            f"padding_free={padding_free}: {seconds:.3f} s/step, {tokens / seconds:.0f} real tokens/s, "
            f"{flops / 1e9:.1f} GFLOP/s = {100 * flops / peak:.0f}% of the {peak / 1e9:.0f} GFLOP/s matmul peak"
        )
    ratio = [a / b for res_a, res_b in zip(runs[True], runs[False], strict=True)
             for a, b in [(statistics.median(res_a["seconds"]), statistics.median(res_b["seconds"]))]]  # fmt: skip
    print(f"padding_free / padded step time per round: {[round(x, 3) for x in ratio]}")
    difference = max(abs(a - b) for a, b in zip(runs[True][0]["losses"], runs[False][0]["losses"], strict=True))
    print(f"largest loss difference over {args.steps} steps: {difference:.2e}")


if __name__ == "__main__":
    main()
