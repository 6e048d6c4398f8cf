"""What serving stacks say about each generation, read into the run's columns by one table.

| the file's field | what it means there | the run's column |
| --- | --- | --- |
| `finish_reason` (OpenAI, vLLM, SGLang, TGI's OpenAI route) | why generation ended: `stop`, `length`, `content_filter`, `tool_calls` (`function_call`), `abort` | `stop_reason`: `eos` (stopped by itself), `stop` (a stop string or stop token), `length`, `content_filter`, `tool_calls`, `abort` |
| `stop_reason` beside `finish_reason` (vLLM) | the stop string or stop-token id that ended generation; null at EOS or the length limit | `stop_sequence`; with `finish_reason` `stop` it makes `stop_reason` `stop` |
| `stop_reason` alone | the run's own vocabulary (what `run --task generation` and Inspect's reader write) | `stop_reason` |
| `n_output_tokens`, `num_output_tokens`, `completion_tokens`, `output_tokens`, `usage.completion_tokens`, `usage.output_tokens`, the length of `token_ids` | tokens generated | `n_output_tokens` |
| `max_tokens`, `max_new_tokens`, `max_completion_tokens` | the generation budget (a request's) | `max_tokens` |

A file that says none of these gets `stop_reason` `unknown` and the output's word count as its length (said in
the manifest's `data.lengths`: `tokens` or `words`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

STOP_REASONS = ("eos", "stop", "length", "content_filter", "tool_calls", "abort", "unknown")
UNKNOWN = "unknown"
FINISH_REASONS = {"stop": "eos", "eos": "eos", "length": "length", "max_tokens": "length",
                  "content_filter": "content_filter", "tool_calls": "tool_calls", "function_call": "tool_calls",
                  "abort": "abort"}
LENGTH_FIELDS = ("n_output_tokens", "num_output_tokens", "completion_tokens", "output_tokens")
BUDGET_FIELDS = ("max_tokens", "max_new_tokens", "max_completion_tokens")
USAGE_FIELDS = ("completion_tokens", "output_tokens")


def stop_of(finish_reason, stop_reason) -> tuple[str, str | None]:
    """(the run's stop_reason, the stop string or token id) from an OpenAI/vLLM `finish_reason` and vLLM's
    `stop_reason`."""
    sequence = None if _missing(stop_reason) else str(stop_reason)
    if _missing(finish_reason):
        return UNKNOWN, sequence
    reason = FINISH_REASONS.get(str(finish_reason).lower(), str(finish_reason))
    if reason == "eos" and sequence is not None:
        reason = "stop"  # vLLM: finish_reason "stop" with the stop string or token that matched
    return reason, sequence


def own_stop(value) -> tuple[str, str | None]:
    """A `stop_reason` given without `finish_reason`: the run's vocabulary as it is; anything else (a stop string
    or a token id, as vLLM writes it) is the sequence that stopped generation."""
    if _missing(value):
        return UNKNOWN, None
    text = str(value)
    return (text, None) if text in STOP_REASONS else ("stop", text)


def read_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with `stop_reason`, `stop_sequence`, `n_output_tokens` and `max_tokens` read from whatever the
    file calls them (the table above); the fields read are dropped, so they never become metadata."""
    frame = frame.copy()
    if "finish_reason" in frame.columns:
        pairs = [stop_of(f, s) for f, s in zip(frame["finish_reason"], _column(frame, "stop_reason"))]
        frame = frame.drop(columns=[c for c in ("finish_reason", "stop_reason") if c in frame.columns])
        frame["stop_reason"], frame["stop_sequence"] = [p[0] for p in pairs], [p[1] for p in pairs]
    elif "stop_reason" in frame.columns:
        pairs = [own_stop(v) for v in frame["stop_reason"]]
        frame["stop_reason"] = [p[0] for p in pairs]
        if any(p[1] is not None for p in pairs):
            frame["stop_sequence"] = [p[1] for p in pairs]
    lengths = _first_numbers(frame, LENGTH_FIELDS, usage=True)
    if lengths is not None:
        frame = frame.drop(columns=[c for c in LENGTH_FIELDS if c in frame.columns])
        frame["n_output_tokens"] = lengths
    budget = _first_numbers(frame, BUDGET_FIELDS)
    if budget is not None:
        frame = frame.drop(columns=[c for c in BUDGET_FIELDS if c in frame.columns])
        frame["max_tokens"] = budget
    if "usage" in frame.columns and frame["usage"].map(lambda v: isinstance(v, dict) or _missing(v)).all():
        frame = frame.drop(columns=["usage"])
    return frame


def _first_numbers(frame: pd.DataFrame, fields, usage: bool = False) -> np.ndarray | None:
    """Per row, the first of `fields` (then `usage.<field>`) that holds a number; None when no row has one."""
    found = np.full(len(frame), np.nan)
    for field in fields:
        if field in frame.columns:
            found = np.where(np.isnan(found), _numbers(frame[field]), found)
    if usage and "usage" in frame.columns:
        for field in USAGE_FIELDS:
            values = frame["usage"].map(lambda u, f=field: u.get(f) if isinstance(u, dict) else None)
            found = np.where(np.isnan(found), _numbers(values), found)
    return None if np.isnan(found).all() else found


def _numbers(values: pd.Series) -> np.ndarray:
    return pd.to_numeric(values.map(lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool)
                                    else None), errors="coerce").to_numpy(dtype=np.float64)


def _column(frame: pd.DataFrame, name: str) -> list:
    return frame[name].tolist() if name in frame.columns else [None] * len(frame)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA
