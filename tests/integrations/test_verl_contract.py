"""Guard for the verl internals that lopti's plugin overrides or calls (lopti/integrations/verl/).

If this fails after a verl upgrade, the message names the symbol that moved or changed: read it, update
lopti/integrations/verl/ where needed, rerun tests/integrations (the real Ray workers included), then record the
new fingerprints here and widen the verl range in pyproject.toml.
"""

import hashlib
import importlib
import inspect

import pytest
import verl

from lopti.integrations.verl.trainer import LoptiPPOTrainer

TESTED_VERL = "0.9.1"
# the source of each, hashed: what the plugin overrides (the trainer's methods, which it extends with super()) and
# what its loss wraps or repeats (ppo_loss fills `global_batch_info`, which the phase loss reuses for agg_loss)
FINGERPRINTS = {
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor": "d7009bd8a69d40b9",
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._init_dataloader": "86cf3749e087b883",
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync.on_init_end": "0cc759a56864dec8",
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync.__init__": "6f938d77859b66ae",
    "verl.workers.utils.losses:ppo_loss": "d7c0f8772b444f55",
    "verl.trainer.ppo.core_algos:agg_loss": "fd052ff7eb539f78",
    "verl.trainer.ppo.core_algos:register_policy_loss": "a01f67e82d670e2e",
    "verl.trainer.ppo.v1.trainer_base:register_trainer": "40ec333837abb2a0",
}
# the parameters of what the plugin calls, in order (by keyword where it passes them so)
SIGNATURES = {
    "verl.trainer.ppo.core_algos:agg_loss": ["loss_mat", "loss_mask", "loss_agg_mode"],
    "verl.trainer.ppo.core_algos:kl_penalty": ["logprob", "ref_logprob", "kl_penalty"],
    "verl.workers.utils.losses:ppo_loss": ["config", "model_output", "data", "dp_group"],
    "verl.workers.utils.padding:no_padding_2_padding": ["tensor", "data"],
    "verl.workers.utils.padding:response_to_nested": ["tensor", "response_mask"],
    "verl.trainer.distillation:is_distillation_enabled": ["config"],
    "verl.utils.config:omega_conf_to_dataclass": ["config", "dataclass_type"],
    "transfer_queue:kv_batch_get": ["keys", "partition_id", "select_fields"],
    "transfer_queue:kv_batch_put": ["keys", "partition_id", "fields"],
}
# the config fields the plugin reads (ActorConfig for the loss, PolicyLossConfig for AR's own settings)
CONFIG_FIELDS = {
    "verl.workers.config:ActorConfig": ["policy_loss", "clip_ratio", "clip_ratio_low", "clip_ratio_high",
                                        "clip_ratio_c", "loss_agg_mode", "entropy_coeff", "use_kl_loss",
                                        "kl_loss_coef", "kl_loss_type", "global_batch_info"],
    "verl.workers.config:PolicyLossConfig": ["loss_mode"],
}  # fmt: skip
# what LoptiPPOTrainer defines over verl's PPOTrainerSync: each is fingerprinted above, or a property of lopti's
OVERRIDES = {"__init__", "_init_dataloader", "on_init_end", "_update_actor", "trainer_mode"}


def resolve(path: str) -> object:
    """Return the object "module:attr.attr" names, failing with the name of the first part verl no longer has."""
    module_name, _, attributes = path.partition(":")
    try:
        found = importlib.import_module(module_name)
    except ImportError as error:
        pytest.fail(
            f"{module_name} is gone (verl {verl.__version__}; lopti was checked against {TESTED_VERL}): {error}"
        )
    for attribute in attributes.split("."):
        if not hasattr(found, attribute):
            pytest.fail(f"{path}: {attribute} is gone (verl {verl.__version__}, checked against {TESTED_VERL})")
        found = getattr(found, attribute)
    return found


@pytest.mark.parametrize("path", sorted(FINGERPRINTS))
def test_verl_internals_unchanged(path):
    digest = hashlib.sha256(inspect.getsource(resolve(path)).encode()).hexdigest()[:16]
    assert digest == FINGERPRINTS[path], (
        f"{path} changed (verl {verl.__version__}, lopti was checked against {TESTED_VERL}); re-check "
        "lopti/integrations/verl before trusting AR/Lopti with this verl version"
    )


@pytest.mark.parametrize("path", sorted(SIGNATURES))
def test_signatures_the_plugin_calls(path):
    parameters = list(inspect.signature(resolve(path)).parameters)
    missing = [name for name in SIGNATURES[path] if name not in parameters]
    assert not missing, f"{path} no longer takes {missing} (verl {verl.__version__}): lopti calls it with them"
    positional = [name for name in parameters if name in SIGNATURES[path]]
    assert positional == SIGNATURES[path], f"{path}: its parameters' order changed to {parameters}"


@pytest.mark.parametrize("path", sorted(CONFIG_FIELDS))
def test_config_fields_the_plugin_reads(path):
    cls = resolve(path)
    fields = set(getattr(cls, "__dataclass_fields__", {})) | {name for name in dir(cls) if not name.startswith("_")}
    missing = [name for name in CONFIG_FIELDS[path] if name not in fields]
    assert not missing, f"{path} has no {missing} (verl {verl.__version__}): the plugin reads them"


def test_the_plugin_registers_where_verl_looks():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    from lopti.integrations.verl.ar import LOSS_MODE, compute_policy_loss_ar

    assert get_policy_loss_fn(LOSS_MODE) is compute_policy_loss_ar
    assert TRAINER_REGISTRY["lopti"] is LoptiPPOTrainer


def test_each_override_of_verls_trainer_is_listed_and_still_overrides():
    defined = {name for name in vars(LoptiPPOTrainer) if not name.startswith("__")} - {"_abc_impl"}
    assert defined | {"__init__"} == OVERRIDES
    base = LoptiPPOTrainer.__mro__[1]
    methods = OVERRIDES - {"trainer_mode"}
    assert all(hasattr(base, name) for name in methods), f"verl's {base.__name__} lost one of {sorted(methods)}"
    assert {path.rpartition(".")[2] for path in FINGERPRINTS if f"{base.__name__}." in path} == methods
    # `trainer_mode` is an attribute verl's __init__ sets and its data path compares with "sync": lopti's property
    # answers the base mode (lopti/integrations/verl/trainer.py)
    assert "self.trainer_mode" in inspect.getsource(base.__init__)
