"""Train a tiny model a few steps with TRL's colocated vLLM generation and print what happened as one JSON line.

Run by tests/vllm_rollouts/test_colocate.py in a process of its own: vLLM's in-process engine
(`distributed_executor_backend="external_launcher"`) sets up torch.distributed once per process.

    python tests/vllm_rollouts/colocate_run.py MODEL_DIR OUT_DIR --trainer lopti|trl [--keep_weights]

`--keep_weights` makes vLLM's CPU build compute every linear layer and the tied output head with the weights it
loaded, not with copies repacked for its CPU kernels (the plain `torch.nn.functional.linear` vLLM itself uses for
layers it does not repack); TRL's weight sync can then reach them (lopti.train.engines explains why it cannot
otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import traceback

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache; vLLM's CPU default is sized for servers


def keep_loaded_weights() -> None:
    """Make vLLM's CPU build compute linear layers and embeddings' output products with their loaded weights."""
    import torch
    from vllm.model_executor.layers import linear, vocab_parallel_embedding

    def keep(self, layer: torch.nn.Module) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    linear.UnquantizedLinearMethod.process_weights_after_loading = keep
    vocab_parallel_embedding.UnquantizedEmbeddingMethod.process_weights_after_loading = keep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--trainer", choices=("lopti", "trl"), required=True)
    parser.add_argument("--keep_weights", action="store_true")
    args = parser.parse_args()
    if args.keep_weights:
        keep_loaded_weights()
    from trl import GRPOConfig, GRPOTrainer

    from lopti.tasks.kk.data import kk_dataset
    from lopti.train import LoptiGRPOConfig, LoptiGRPOTrainer
    from lopti.train.engines import colocated_vllm_model

    prompts = kk_dataset(people="2", train=16, test=0, seed=0, template="compact")["train"]
    prompts = prompts.map(lambda row: {"prompt": row["prompt"][0]["content"]})

    def length_reward(completions: list[str], **kwargs) -> list[float]:
        return [len(completion) / 50 for completion in completions]

    common = dict(
        output_dir=args.out, per_device_train_batch_size=8, num_generations=4, max_completion_length=12,
        max_steps=4, num_iterations=2, learning_rate=1e-2, report_to=[], use_cpu=True, logging_steps=1,
        save_strategy="no", use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, seed=0,
    )  # fmt: skip
    if args.trainer == "lopti":
        config = LoptiGRPOConfig(**common, ar_alpha=0.3, lopti=True, lopti_eta=0.01, advantage_estimator="grpo")
        trainer_class = LoptiGRPOTrainer
    else:
        config, trainer_class = GRPOConfig(**common), GRPOTrainer
    report: dict = {"generate_calls": 0, "weight_gaps": [], "ratio_reached_loss": False}
    try:
        trainer = trainer_class(model=args.model, reward_funcs=length_reward, args=config, train_dataset=prompts)
        engine, generate = trainer.vllm_generation.llm, trainer.vllm_generation.llm.generate
        trained = dict(trainer.model.named_parameters())

        def generate_and_compare(*call_args, **call_kwargs):  # the weights vLLM samples with, against the trainer's
            report["generate_calls"] += 1
            shared = [(p, trained[n]) for n, p in colocated_vllm_model(engine).named_parameters() if n in trained]
            # in vLLM's dtype (bf16 on CPU), and the trainer's rows of the embedding (vLLM pads the vocabulary)
            gaps = [(a[: len(b)].float() - b.detach().to(a.dtype).float()).abs().max().item() for a, b in shared]
            report["weight_gaps"].append(max(gaps))
            report["vllm_dtype"] = str(next(p for p, _ in shared).dtype)
            return generate(*call_args, **call_kwargs)

        engine.generate = generate_and_compare
        compute_loss = trainer._compute_loss

        def watched_loss(model, inputs):
            report["ratio_reached_loss"] |= "importance_sampling_ratio" in inputs
            return compute_loss(model, inputs)

        trainer._compute_loss = watched_loss
        trainer.train()
    except Exception as error:  # reported to the test, which asserts on it
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()[-3000:]
        report["frames"] = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    else:
        report["log"] = trainer.state.log_history
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
