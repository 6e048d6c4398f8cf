"""vLLM `RequestOutput` dumps: one request a line, as `LLM.generate`'s results are saved (`{"request_id",
"prompt", "outputs": [{"index", "text", "token_ids", "finish_reason", "stop_reason", ...}], ...}`), with any keys the
user added (a `reference`, a `schema`, metadata).

One row per output (`example_id` the request id, `request_id:index` when a request has several outputs): `prompt`,
`output` (the text), `finish_reason`/`stop_reason` read by `completions` into `stop_reason` and `stop_sequence`,
`n_output_tokens` from `token_ids` (or `num_output_tokens`). Tables that already hold flat `output`,
`finish_reason`, `stop_reason` columns (a DataFrame of vLLM results) are tables, read the same way.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from erroranalysis.core.errors import DataError, where
from erroranalysis.sources import completions
from erroranalysis.sources.table import jsonl_records

NAME = "vllm"
DROPPED = ("outputs", "prompt_token_ids", "prompt_logprobs", "finished", "metrics", "encoder_prompt",
           "encoder_prompt_token_ids", "num_cached_tokens", "kv_transfer_params", "multi_modal_placeholders")


def detect(path: Path, first) -> str | None:
    """None when the first record is a RequestOutput; else why it is not."""
    outputs = first.get("outputs") if isinstance(first, dict) else None
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict) and "text" in outputs[0] \
            and "finish_reason" in outputs[0]:
        return None
    return "no 'outputs' list of {text, finish_reason} (a vLLM RequestOutput)"


def read(path: Path, params, *, encoding: str = "utf-8", split=None) -> pd.DataFrame:
    rows = [row for number, record in jsonl_records(path, encoding) for row in _rows(record, path, number)]
    if not rows:
        raise DataError(f"{path}: no requests; write one RequestOutput object per line.")
    return completions.read_columns(pd.DataFrame.from_records(rows))


def _rows(record: dict, path: Path, number: int) -> list[dict]:
    outputs = record.get("outputs")
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, dict) for o in outputs):
        raise DataError(f"{where(path, number, 'outputs')}: expected a list of completion outputs "
                        "({text, finish_reason, ...}), as vLLM's RequestOutput holds.")
    base = {k: v for k, v in record.items() if k not in DROPPED and k != "request_id"}
    request = record.get("request_id")
    rows = []
    for i, out in enumerate(outputs):
        if not isinstance(out.get("text"), str):
            raise DataError(f"{where(path, number, 'outputs')}: output {i} has no text.")
        row = {**base, "output": out["text"], "finish_reason": out.get("finish_reason"),
               "stop_reason": out.get("stop_reason"), "_line": number}
        tokens = out.get("token_ids")
        if isinstance(tokens, list):
            row["num_output_tokens"] = len(tokens)
        elif "num_output_tokens" in out:
            row["num_output_tokens"] = out["num_output_tokens"]
        if request is not None:
            row["example_id"] = f"{request}:{i}" if len(outputs) > 1 else str(request)
        rows.append(row)
    return rows
