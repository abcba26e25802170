"""Decoding for evaluation: batched 🤗 generate (greedy or sampled), and vLLM when installed with a GPU."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm
from transformers.generation.streamers import BaseStreamer


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    seed: int = 0,
    description: str = "generating",
) -> list[list[tuple[str, list[int]]]]:
    """Return, per prompt, `samples` (text, ids) completions; temperature 0 is greedy decoding.

    `model` is a 🤗 causal LM, or a vLLM `LLM` (see `load_vllm`), which then does the decoding. On a terminal, a
    progress bar named `description` counts the answers as they end, with the time left.
    """
    if is_vllm(model):
        return generate_vllm(model, prompts, samples, temperature, max_new_tokens, seed)
    tokenizer.padding_side = "left"
    model.eval()
    flat = [p for p in prompts for _ in range(samples)]
    outputs: list[tuple[str, list[int]]] = []
    with (
        torch.random.fork_rng(),  # evaluating must not move the trainer's random stream
        tqdm(total=len(flat), desc=description, unit="answer", leave=False, disable=None) as bar,
    ):
        torch.manual_seed(seed)
        for start in range(0, len(flat), batch_size):
            texts = flat[start : start + batch_size]
            outputs += _decode_batch(model, tokenizer, texts, temperature, max_new_tokens, AnswersEnded(bar, tokenizer))
    return [outputs[i * samples : (i + 1) * samples] for i in range(len(prompts))]


class AnswersEnded(BaseStreamer):
    """A `generate` streamer that advances a progress bar by one as each row's answer ends: generate streams the
    prompts, then each step's token of every row (padding after a row's end), then calls `end`, when the rows cut
    at the answer budget count too."""

    def __init__(self, bar: tqdm, tokenizer) -> None:
        self.bar, self.end_token_id = bar, tokenizer.eos_token_id
        self.ended: torch.Tensor | None = None  # which rows have ended, once generate has streamed the prompts
        self.counted = 0

    def put(self, value: torch.Tensor) -> None:
        if self.ended is None:
            self.ended = torch.zeros(len(value), dtype=torch.bool)
        else:
            self.ended |= value.flatten().cpu() == self.end_token_id
            self.advance(int(self.ended.sum()))

    def end(self) -> None:
        self.advance(len(self.ended))

    def advance(self, ended: int) -> None:
        self.bar.update(ended - self.counted)
        self.counted = ended


def _decode_batch(
    model, tokenizer, texts: list[str], temperature: float, max_new_tokens: int, streamer: BaseStreamer | None = None
) -> list[tuple[str, list[int]]]:
    """Return (text, ids) for each prompt of one batch, cut after the first end-of-sequence token."""
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = dict(temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else {}
    generated = model.generate(
        **batch,
        max_new_tokens=max_new_tokens,
        do_sample=temperature > 0,
        pad_token_id=tokenizer.pad_token_id,
        streamer=streamer,
        **sampling,
    )[:, batch["input_ids"].shape[1] :]
    outputs = []
    for row in generated.tolist():
        ids = row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
        outputs.append((tokenizer.decode(ids, skip_special_tokens=True), ids))
    return outputs


def is_vllm(model) -> bool:
    """Return True for a vLLM engine (`vllm.LLM`) rather than a 🤗 model."""
    return type(model).__module__.split(".")[0] == "vllm"


def load_vllm(model_path: str, seed: int = 0):
    """Return a vLLM engine for `model_path` when vLLM is installed and a GPU is present, else None."""
    try:
        import vllm
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return vllm.LLM(model=model_path, seed=seed)


def generate_vllm(
    llm, prompts: list[str], samples: int, temperature: float, max_new_tokens: int, seed: int
) -> list[list[tuple[str, list[int]]]]:
    """Return, per prompt, `samples` (text, ids) completions decoded by vLLM (ids end with EOS if it stopped)."""
    from vllm import SamplingParams

    params = SamplingParams(n=samples, temperature=temperature, max_tokens=max_new_tokens, seed=seed)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [[(o.text, list(o.token_ids)) for o in output.outputs] for output in outputs]


def prompt_text(prompt: str | list[dict], tokenizer) -> str:
    """Return the text to feed the model: a raw prompt as is, chat messages through the chat template."""
    if isinstance(prompt, str):
        return prompt
    continues = prompt[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=not continues, continue_final_message=continues
    )
