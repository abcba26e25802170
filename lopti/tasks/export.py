"""Writing generated splits to disk: one JSONL (lopti's rows) and one Parquet (verl's schema) per split."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_splits(
    out_dir: str | Path,
    splits: dict[str, list[dict[str, Any]]],
    arrow_row: Callable[[dict[str, Any]], dict[str, Any]] = dict,
) -> dict[str, Path]:
    """Write {split}.jsonl and {split}.parquet for each split; return the paths by file name.

    `arrow_row` turns a row into what Parquet can hold (K&K flattens its nested statements to JSON).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, rows in splits.items():
        jsonl = out / f"{split}.jsonl"
        jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        parquet = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist([arrow_row(r) for r in rows]), parquet)
        written[jsonl.name], written[parquet.name] = jsonl, parquet
    return written
