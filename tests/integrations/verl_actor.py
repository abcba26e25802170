"""A tiny causal LM, an RL-step batch sampled from it, and a verl actor worker that trains it on CPU.

verl's own actor worker (`verl.workers.engine_workers.ActorRolloutRefWorker`) cannot start on a CPU-only
machine: verl 0.9 has no CPU platform (its platform detection falls back to "nvidia", so the engine asks for
CUDA devices and NCCL). `ActorWorker` keeps the part of it that the `lopti` trainer mode relies on and runs
it under verl's real single controller: registered `update_actor` (the same dispatch mode, so the driver's
`KVBatchMeta` is split over the data-parallel ranks and each rank fetches its rows from the TransferQueue
through verl's `tqbridge`), `set_loss_fn`, and a training step shaped as verl's FSDP engine's — global
token count and `dp_size` in the batch, the installed loss function called with the model output in verl's
no-padding layout, gradients averaged over the ranks, clipped to `optim.clip_grad`, one AdamW step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict
from transformers import Qwen2Config, Qwen2ForCausalLM
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.base.worker import Worker
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss

VOCAB = 12
# Larger than HF's 0.02 so that the tiny model's next-token probabilities spread on both sides of η = 0.5:
# both Lopti groups are then non-empty on tokens sampled from the model itself.
INIT_RANGE = 0.6
PROMPT_LENGTHS = (3, 2, 4, 3)
RESPONSE_LENGTHS = (5, 3, 6, 4)
ADVANTAGES = (1.5, -0.5, 0.8, -1.2)


def build_model(seed: int = 0) -> Qwen2ForCausalLM:
    """Return the tiny Qwen2 causal LM, the same weights for the same seed in every process."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        initializer_range=INIT_RANGE,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config).float()


def token_log_probs(model: Qwen2ForCausalLM, sequence: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return log π(sequence[i + 1] | sequence[: i + 1]) at `temperature` for each position, 0 at the last.

    This is verl's no-padding layout for one sequence: the value at position i scores the next token, so
    `no_padding_2_padding` reads a response's log-probs from the positions just before its tokens. One
    sequence per forward pass, so the values do not depend on how sequences are batched or sharded.
    """
    logits = model(sequence.unsqueeze(0)).logits[0, :-1].float() / temperature
    scored = torch.log_softmax(logits, dim=-1).gather(-1, sequence[1:, None]).squeeze(-1)
    return torch.cat([scored, scored.new_zeros(1)])


def nested_log_probs(model: Qwen2ForCausalLM, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return the model's log-probs of nested (jagged) prompt + response ids, nested the same way."""
    rows = [token_log_probs(model, row, temperature) for row in input_ids.unbind()]
    return torch.nested.nested_tensor_from_jagged(torch.cat(rows), offsets=input_ids.offsets())


def response_log_probs(
    model: Qwen2ForCausalLM, prompts: list[torch.Tensor], responses: list[torch.Tensor], temperature: float
) -> torch.Tensor:
    """Return the (B, T) log-probs of each response given its prompt, zero-padded on the right."""
    rows = []
    for prompt, response in zip(prompts, responses, strict=True):
        scored = token_log_probs(model, torch.cat([prompt, response]), temperature)
        rows.append(scored[len(prompt) - 1 : len(prompt) - 1 + len(response)])
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)


def nest(rows: list[torch.Tensor]) -> torch.Tensor:
    """Return rows of different lengths as one jagged nested tensor (verl's and the TransferQueue's layout)."""
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def rows_of(padded: torch.Tensor, lengths: tuple[int, ...]) -> list[torch.Tensor]:
    """Return the first `lengths[i]` values of each row of a (B, T) tensor."""
    return [row[:length] for row, length in zip(padded, lengths, strict=True)]


@torch.no_grad()
def sample_rl_batch(
    policy: Qwen2ForCausalLM, reference: Qwen2ForCausalLM, temperature: float, seed: int
) -> dict[str, list[torch.Tensor]]:
    """Return one RL step's rows, as verl's sync step leaves them before the actor update.

    Responses are sampled from `policy` at `temperature`; `old_log_probs` are the policy's log-probs of
    them and `ref_log_prob` the reference model's, both at that temperature, as verl computes them;
    advantages are one constant per response, as GRPO gives.
    """
    generator = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator) for n in PROMPT_LENGTHS]
    responses = []
    for prompt, length in zip(prompts, RESPONSE_LENGTHS, strict=True):
        sequence = prompt
        for _ in range(length):
            logits = policy(sequence.unsqueeze(0)).logits[0, -1] / temperature
            token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            sequence = torch.cat([sequence, token])
        responses.append(sequence[len(prompt) :])
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": [torch.cat(pair) for pair in zip(prompts, responses, strict=True)],
        "response_mask": [torch.ones(n, dtype=torch.int64) for n in RESPONSE_LENGTHS],
        "old_log_probs": rows_of(response_log_probs(policy, prompts, responses, temperature), RESPONSE_LENGTHS),
        "ref_log_prob": rows_of(response_log_probs(reference, prompts, responses, temperature), RESPONSE_LENGTHS),
        "advantages": [torch.full((n,), a) for n, a in zip(RESPONSE_LENGTHS, ADVANTAGES, strict=True)],
    }


def with_global_counts(data: TensorDict, dp_size: int, batch_num_tokens: int, global_batch_size: int) -> TensorDict:
    """Write the global batch sizes verl's engine writes before calling the loss (its token-mean divides by them)."""
    tu.assign_non_tensor(data, dp_size=dp_size, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
    return data


class ActorWorker(Worker):
    """One data-parallel rank of the actor: the tiny model, AdamW, and verl's loss (`ppo_loss` by default)."""

    def __init__(self, config: ActorConfig, seed: int = 0) -> None:
        super().__init__()
        torch.set_num_threads(1)
        self.config = config
        self.seed = seed
        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)
        self.reset()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reset(self) -> None:
        """Start from the seed's weights with a fresh optimizer and verl's default loss (what init_model does)."""
        self.model = build_model(self.seed)
        optim = self.config.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay
        )
        self.loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]] = functools.partial(
            ppo_loss, config=self.config
        )
        self.seen: list[dict[str, torch.Tensor]] = []

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_loss_fn(self, loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]]) -> None:
        """Install the actor loss, as verl's `ActorRolloutRefWorker.set_loss_fn` (the `lopti` trainer calls it)."""
        self.loss_fn = loss_fn

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weights(self) -> dict[str, torch.Tensor]:
        """Return this rank's parameters."""
        return {name: value.detach().clone() for name, value in self.model.named_parameters()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fetched(self) -> list[dict[str, torch.Tensor]]:
        """Return, per `update_actor` call, the padded fields this rank fetched from the TransferQueue."""
        return self.seen

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: TensorDict) -> TensorDict:
        """Take one optimizer step on this rank's rows (one mini-batch, one epoch) and return verl's metrics."""
        mini_batch, epochs = tu.get(data, "mini_batch_size"), tu.get(data, "epochs")
        if mini_batch != len(data) * self.world_size or epochs != 1:
            raise ValueError(f"this worker trains one mini-batch per call, got {mini_batch=} {epochs=}")
        fields = [name for name in data.keys() if name != "input_ids"]  # noqa: SIM118 (TensorDict)
        self.seen.append(data.select(*fields).to_padded_tensor().to_dict())
        num_tokens = data["response_mask"].values().sum()
        dist.all_reduce(num_tokens)
        with_global_counts(data, self.world_size, int(num_tokens), mini_batch)

        self.optimizer.zero_grad()
        log_probs = nested_log_probs(self.model, data["input_ids"], tu.get(data, "temperature"))
        loss, loss_metrics = self.loss_fn(model_output={"log_probs": log_probs}, data=data, dp_group=None)
        loss.backward()
        for parameter in self.model.parameters():  # what FSDP's reduce-scatter does: the mean over ranks
            dist.all_reduce(parameter.grad)
            parameter.grad /= self.world_size
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.clip_grad)
        self.optimizer.step()

        totals = torch.tensor([loss.item(), loss_metrics["actor/pg_loss"].aggregate()])
        dist.all_reduce(totals)
        totals /= self.world_size  # verl's aggregate_dp: the mean over ranks of each rank's share
        metrics = {
            "loss": [totals[0].item()],
            "pg_loss": [totals[1].item()],
            "grad_norm": [grad_norm.item()],
            "mfu": [0.0],  # verl's trainer reads it; this worker does not count FLOPs
        }
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})


def verl_batch(
    rows: dict[str, list[torch.Tensor]], dp_size: int, batch_num_tokens: int, global_batch_size: int
) -> TensorDict:
    """Return rows as the micro-batch verl's engine hands its loss: nested fields plus the global counts."""
    data = TensorDict({name: nest(values) for name, values in rows.items()}, batch_size=len(rows["prompts"]))
    return with_global_counts(data, dp_size, batch_num_tokens, global_batch_size)


def sharded_gradients(
    rank: int, world_size: int, init_file: str, out_file: str, config: ActorConfig, rows: dict
) -> None:
    """One FSDP2 rank (a `torch.multiprocessing.spawn` target): verl's `ppo_loss` on this rank's share of the
    rows with the tiny model sharded by `fully_shard`; rank 0 saves the unsharded gradients to `out_file`."""
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        model = build_model()
        for layer in model.model.layers:  # verl's FSDP2 wrap policy: each decoder layer, then the root
            fully_shard(layer)
        fully_shard(model)
        share = len(rows["prompts"]) // world_size
        mine = {name: values[rank * share : (rank + 1) * share] for name, values in rows.items()}
        total_tokens = sum(len(row) for row in rows["responses"])
        data = verl_batch(mine, world_size, total_tokens, len(rows["prompts"]))
        log_probs = nested_log_probs(model, data["input_ids"], temperature=1.0)
        loss, _ = ppo_loss(config, {"log_probs": log_probs}, data)
        loss.backward()
        gradients = {name: parameter.grad.full_tensor() for name, parameter in model.named_parameters()}
        if rank == 0:
            torch.save(gradients, out_file)
    finally:
        dist.destroy_process_group()
