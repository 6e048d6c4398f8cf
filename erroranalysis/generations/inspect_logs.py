"""Inspect AI eval logs (`.eval` or `.json`), read with Inspect's own `inspect_ai.log.read_eval_log`.

One row per sample (and epoch): `example_id` (the sample id; `id:epoch` when the log has several epochs),
`prompt` (a text input) or `messages` (a chat input, as role/content), `output` (the completion; a tool call as
`{"tool_calls": [...]}`), `reference` (the target; a JSON list when there are several), `stop_reason`
(Inspect's, as eos/length where they mean that), `n_output_tokens` (the usage's), `score_<scorer>` for each
scorer (its value as a number: C 1, P 0.5, I and N 0, booleans and numbers as they are; the first scorer is the
judge, `frame.attrs["judge"]`), `scored_answer`, `task`, `model`, and the sample's scalar metadata.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, UserError

GRADES = {"C": 1.0, "P": 0.5, "I": 0.0, "N": 0.0}  # inspect_ai.scorer CORRECT, PARTIAL, INCORRECT, NOANSWER
STOP_REASONS = {"stop": "eos", "max_tokens": "length", "model_length": "length"}


def read_log(path: Path) -> pd.DataFrame:
    """The log's samples as a table with `_line` (the sample's 1-based position in the log)."""
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise UserError(f"{path}: reading an Inspect AI log needs inspect-ai: pip install 'erroranalysis-ml[inspect]' "
                        "(or pip install inspect-ai).") from None
    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # Inspect raises pydantic, zip and JSON errors for a damaged or foreign file
        raise DataError(f"{path}: not a readable Inspect AI log ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}).") from None
    samples = log.samples or []
    if not samples:
        raise DataError(f"{path}: the log holds no samples (status {log.status!r}); log them with Inspect's "
                        "default log_samples=True.")
    epochs = len({s.epoch for s in samples}) > 1
    chat = any(not isinstance(s.input, str) for s in samples)
    rows = [_row(s, i, chat, epochs, log.eval.task, log.eval.model) for i, s in enumerate(samples, start=1)]
    frame = pd.DataFrame.from_records(rows)
    scorers = [c for c in frame.columns if c.startswith("score_")]
    if scorers:
        frame.attrs["judge"] = scorers[0]
    return frame


def _row(sample, number: int, chat: bool, epochs: bool, task: str, model: str) -> dict:
    row: dict = {"example_id": f"{sample.id}:{sample.epoch}" if epochs else str(sample.id), "_line": number}
    if chat:
        row["messages"] = _messages(sample.input)
    else:
        row["prompt"] = sample.input
    output = sample.output
    row["output"] = _completion(output)
    row["reference"] = _target(sample.target)
    reason = getattr(output, "stop_reason", None) if output is not None else None
    row["stop_reason"] = STOP_REASONS.get(str(reason), str(reason)) if reason else "unknown"
    usage = getattr(output, "usage", None) if output is not None else None
    if usage is not None and getattr(usage, "output_tokens", None) is not None:
        row["n_output_tokens"] = int(usage.output_tokens)
    scores = sample.scores or {}
    for i, (name, score) in enumerate(scores.items()):
        value = grade(score.value)
        if i == 0:
            row["scored_answer"] = score.answer
        row[f"score_{name}"] = value
    row["task"], row["model"] = task, model
    if sample.error is not None:
        row["sample_error"] = str(getattr(sample.error, "message", sample.error))[:200]
    for key, value in (sample.metadata or {}).items():
        if isinstance(value, (bool, int, float, str)) and key not in row:
            row[key] = value
    return row


def grade(value) -> float:
    """A score's value as a number: Inspect's letter grades, booleans, numbers; NaN for anything else."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else np.nan
    if isinstance(value, str):
        if value in GRADES:
            return GRADES[value]
        try:
            return float(value)
        except ValueError:
            return np.nan
    return np.nan


def _messages(value) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [{"role": m.role, "content": m.text} for m in value]


def _completion(output) -> str:
    if output is None:
        return ""
    text = output.completion or ""
    message = output.choices[0].message if output.choices else None
    calls = getattr(message, "tool_calls", None) if message is not None else None
    if calls and not text.strip():
        return json.dumps({"tool_calls": [{"name": c.function, "arguments": c.arguments} for c in calls]},
                          ensure_ascii=False)
    return text


def _target(target) -> str | None:
    if isinstance(target, str):
        return target
    values = list(target or [])
    if not values:
        return None
    return values[0] if len(values) == 1 else json.dumps(values, ensure_ascii=False)
