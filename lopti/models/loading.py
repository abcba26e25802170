"""Model and tokenizer loading: an embedded model by name, a local 🤗 folder, or a hub id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lopti.models.embedded import BUILDERS, embedded_model_path

EMBEDDED_MODELS = tuple(BUILDERS)
MODEL_HELP = f"Embedded model name ({', '.join(EMBEDDED_MODELS)}), 🤗 folder (e.g. runs/X/final) or hub id."
# Without one of these, transformers 5 silently builds an empty tokenizer from config.json alone.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def resolve_model(name_or_path: str) -> str:
    """Return a loadable path or hub id, building an embedded model on first use.

    Raises FileNotFoundError for a local-looking path that does not exist, so no compute is spent first.
    """
    if name_or_path in EMBEDDED_MODELS:
        return str(embedded_model_path(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json (not a 🤗 model folder)")
        for weights in sorted(path.glob("*.safetensors")):
            problem = safetensors_problem(weights)
            if problem:
                raise ValueError(f"model folder {path}: {weights.name} is damaged ({problem}); save it again")
        return str(path)
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1
    if looks_local:
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither an existing folder, a hub id (org/name), nor an embedded model "
            f"({', '.join(EMBEDDED_MODELS)})"
        )
    return name_or_path


def safetensors_problem(path: Path) -> str | None:
    """Return what is wrong with a .safetensors file's header or length, or None; reads only the header.

    A truncated download or a garbage file then fails in a millisecond, by name, instead of as a traceback
    from deep inside from_pretrained. The format: an 8-byte little-endian header length, a JSON header whose
    tensors' data_offsets cover the rest of the file exactly.
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        length = int.from_bytes(prefix, "little")
        if len(prefix) < 8 or length > size - 8:
            return f"{size} bytes: no valid header"
        try:
            header = json.loads(handle.read(length))
            end = max((meta["data_offsets"][1] for key, meta in header.items() if key != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return "its header is not a safetensors header"
    if 8 + length + end != size:
        return f"{size} bytes where its header describes {8 + length + end}: truncated or padded"
    return None


def load_tokenizer(name_or_path: str):
    """Return the tokenizer of a model, with a pad token, or raise a ValueError naming the model."""
    from transformers import AutoTokenizer

    folder = Path(name_or_path)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"model folder {folder} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); save one there")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load a tokenizer for model {name_or_path!r}: {error}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name_or_path: str, **kwargs: Any):
    """Return the causal LM at `name_or_path` (fp32 unless `dtype` says otherwise)."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
    except OSError as error:
        raise ValueError(f"cannot load model {name_or_path!r} (offline, or not a causal LM?): {error}") from None
