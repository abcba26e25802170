"""The colocated-vLLM weight-sync check against layers built as vLLM's CPU build leaves them after loading: a kernel
with a packed copy of the weight (the weight emptied, or kept as the tied output head's), or the plain linear product
with the loaded weight that vLLM falls back to where no packed kernel can be built. tests/vllm_rollouts runs the
check inside a real vLLM engine on whichever of these the machine's CPU gets."""

import pytest
import torch

from lopti.errors import UserError
from lopti.train.engines import check_weight_sync, computes_with_a_copy


def vllm_layer(weight: torch.Tensor) -> torch.nn.Module:
    """Return a layer holding `weight` as vLLM's loaded parameter, with the `weight_loader` a sync copies through."""
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    layer.weight.weight_loader = lambda parameter, loaded: parameter.data.copy_(loaded)
    return layer


def packed(layer: torch.nn.Module, remove_weight: bool) -> torch.nn.Module:
    """Give `layer` a kernel that computes with a copy of its weight, as vLLM's oneDNN/sgl-kernel/zentorch paths do."""
    copy = layer.weight.detach().clone()
    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, copy, bias)
    if remove_weight:
        layer.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    return layer


def fallback(layer: torch.nn.Module) -> torch.nn.Module:
    """Give `layer` vLLM's fallback kernel: the plain product with the weight the layer hands it."""
    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)
    return layer


def model_of(**layers: torch.nn.Module) -> torch.nn.Module:
    model = torch.nn.Module()
    for name, layer in layers.items():
        model.add_module(name, layer)
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_computing_from_the_handed_weight_is_accepted(dtype):
    layers = {"qkv": fallback(vllm_layer(torch.randn(6, 4, dtype=dtype))), "norm": vllm_layer(torch.ones(4))}
    layers["head"] = vllm_layer(torch.randn(5, 4, dtype=dtype))
    layers["head"].cpu_linear = torch.nn.functional.linear
    check_weight_sync(model_of(**layers))


@pytest.mark.parametrize("remove_weight", [True, False], ids=["emptied linear", "tied output head"])
def test_a_kernel_computing_from_a_packed_copy_is_refused_naming_the_layer(remove_weight):
    head = packed(vllm_layer(torch.randn(5, 4)), remove_weight)
    model = model_of(qkv=fallback(vllm_layer(torch.randn(6, 4))), lm=head)
    with pytest.raises(UserError, match=r"^use_vllm: this vLLM build computes lm with a copy of its weight"):
        check_weight_sync(model)


def test_only_vllms_cpu_layers_with_a_loaded_matrix_are_probed():
    plain = torch.nn.Linear(4, 3)  # a GPU build's layer: no cpu_linear, computes with its parameter
    missing = fallback(vllm_layer(torch.empty(3, 4, device="meta")))  # a layer the checkpoint does not have
    assert not computes_with_a_copy(plain) and not computes_with_a_copy(missing)
    assert computes_with_a_copy(packed(vllm_layer(torch.randn(3, 4)), remove_weight=True))
