"""The vLLM decoding path of `lopti eval`, against a stand-in `vllm` module (no GPU on the CI machine).

It checks lopti's side of the contract: requests n samples with the temperature, token budget and seed,
and reads each output's text and token ids (ending with EOS when vLLM stopped on it).
"""

import sys
import types
from types import SimpleNamespace

from lopti.evaluation.generation import generate, is_vllm, load_vllm
from lopti.evaluation.scoring import judge_rows
from lopti.tasks.registry import get_task


def fake_vllm(answers: dict[str, str], eos: int) -> types.ModuleType:
    module = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        __module__ = "vllm"

        def __init__(self, **kwargs):
            self.calls = []

        def generate(self, prompts, params, use_tqdm=True):
            self.calls.append(params.kwargs)
            outputs = []
            for prompt in prompts:
                text = answers[prompt]
                finished = [SimpleNamespace(text=text, token_ids=[5, 6, eos])]
                cut = [SimpleNamespace(text=text, token_ids=[5, 6, 7])]  # ran out of tokens
                outputs.append(SimpleNamespace(outputs=(finished + cut * (params.kwargs["n"] - 1))))
            return outputs

    module.LLM, module.SamplingParams = LLM, SamplingParams
    return module


def test_generate_and_judge_through_vllm(monkeypatch):
    rows = [
        {"id": "a", "people": 2, "prompt": "P1", "names": ["Ann", "Bob"], "solution": [True, False]},
        {"id": "b", "people": 2, "prompt": "P2", "names": ["Ann", "Bob"], "solution": [False, False]},
    ]
    right = "<think>x</think>\n<answer>\n(1) Ann is a knight\n(2) Bob is a knave\n</answer>"
    module = fake_vllm({"P1": right, "P2": right}, eos=2)
    monkeypatch.setitem(sys.modules, "vllm", module)
    llm = module.LLM(model="m")
    assert is_vllm(llm)
    tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    out = generate(llm, tokenizer, ["P1"], samples=2, temperature=0.7, max_new_tokens=9, seed=3)
    assert out == [[(right, [5, 6, 2]), (right, [5, 6, 7])]]
    assert llm.calls[-1] == {"n": 2, "temperature": 0.7, "max_tokens": 9, "seed": 3}
    records = judge_rows(llm, tokenizer, rows, get_task("kk").judge, "people", samples=2, temperature=1.0)
    # the first sample ended on EOS and is judged; the second was cut off: wrong and badly formed
    assert [r["correct"] for r in records] == [[True, False], [False, False]]
    assert [r["well_formed"] for r in records] == [[True, False], [True, False]]


def test_load_vllm_needs_the_package_and_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed
    assert load_vllm("some/model") is None
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm({}, eos=2))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert load_vllm("some/model") is None
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert is_vllm(load_vllm("some/model"))
