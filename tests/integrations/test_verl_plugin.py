"""`import verl` registers lopti's pieces through the `verl.plugins` entry points (no env variable)."""

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
import verl
loaded = sorted(m for m in ("lopti.integrations.verl.ar", "lopti.integrations.verl.trainer") if m in sys.modules)
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
print(json.dumps({"loaded": loaded, "loss": "lopti_ar" in POLICY_LOSS_REGISTRY,
                  "trainer": getattr(TRAINER_REGISTRY.get("lopti"), "__qualname__", None)}))
"""


def probe(plugins_policy: str | None) -> dict:
    """Return what a fresh interpreter has registered after a bare `import verl`."""
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    if plugins_policy is not None:
        env["VERL_USE_EXTERNAL_PLUGINS"] = plugins_policy
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_verl_registers_the_ar_loss_and_the_lopti_trainer():
    # verl swallows a failing plugin at DEBUG level, so assert on its registries, not on the import.
    assert probe(None) == {
        "loaded": ["lopti.integrations.verl.ar", "lopti.integrations.verl.trainer"],
        "loss": True,
        "trainer": "LoptiPPOTrainer",
    }


def test_registration_comes_from_the_entry_points():
    # with verl's plugin discovery off, nothing of lopti is loaded: the registration above is the entry points'
    assert probe("none") == {"loaded": [], "loss": False, "trainer": None}
    assert probe("lopti_ar")["loaded"] == ["lopti.integrations.verl.ar"]
