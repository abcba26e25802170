"""Model and tokenizer loading: an embedded model by name, a local 🤗 folder, or a hub id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EMBEDDED_MODELS = ("tiny", "tiny-base", "smollm2-135m")
# Without one of these, transformers 5 silently builds an empty tokenizer from config.json alone.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def resolve_model(name_or_path: str) -> str:
    """Return a loadable path or hub id, building an embedded model on first use.

    Raises FileNotFoundError for a local-looking path that does not exist, so no compute is spent first.
    """
    if name_or_path in EMBEDDED_MODELS:
        from lopti.train.embedded import embedded_model_path

        return str(embedded_model_path(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json (not a 🤗 model folder)")
        return str(path)
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1
    if looks_local:
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither an existing folder, a hub id (org/name), nor an embedded model "
            f"({', '.join(EMBEDDED_MODELS)})"
        )
    return name_or_path


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
    """Return the causal LM at `name_or_path` (fp32 unless `torch_dtype` says otherwise)."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
    except OSError as error:
        raise ValueError(f"cannot load model {name_or_path!r} (offline, or not a causal LM?): {error}") from None
