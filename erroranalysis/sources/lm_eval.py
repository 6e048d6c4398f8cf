"""lm-evaluation-harness `--log_samples` files (`samples_<task>_<time>.jsonl`), as a generations table.

Each line is one document of a `generate_until` task under one filter: `doc_id`, `doc` (the dataset row), `target`,
`arguments` (the prompt: `{"gen_args_0": {"arg_0": prompt, "arg_1": {...}}}`, or `[[prompt, {...}]]` from older
versions), `resps` (the generation), `filtered_resps` (the answer the filter extracted from it), `filter`, `metrics`
(the names) and one field per metric. A task with several filters (gsm8k's `strict-match` and `flexible-extract`)
writes each document once per filter.

The table has one row per document of ONE filter (`SourceParams.filter`, default the file's first, as lm-eval
lists the task's filters), so no document counts twice: `example_id` (lm-eval's `doc_id`), `prompt`, `output` (the
generation: what is checked and shown), `filtered_output` (the filter's answer beside it), `reference` (the target),
`task`, `filter`, each metric, `judge_detail` (why the first metric failed: the filter extracted nothing, or the
answer it extracted), the document's short scalar fields as `doc_<name>` (metadata) and its long text fields for
reading only (`frame.attrs["reading_columns"]`, never metadata groups). The first metric is the judge
(`frame.attrs["judge"]`). Every filter's score, as lm-eval's own table reports it (task, filter, metric, value, n),
is in `frame.attrs["filters"]`.

Loglikelihood tasks (multiple choice, perplexity) generate no text: their files are refused with what was found.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sources.table import jsonl_records

NAME = "lm-eval"
DOC_TEXT_LIMIT = 64  # a document's string fields up to this length are metadata (categories, not passages)
NO_ANSWER = "[invalid]"  # what lm-eval's regex filters return when they extract nothing


def detect(path: Path, first) -> str | None:
    if isinstance(first, dict) and "doc" in first and ("resps" in first or "filtered_resps" in first):
        return None
    return "no 'doc' with 'resps' or 'filtered_resps' (an lm-eval --log_samples line)"


def read(path: Path, params, *, encoding: str = "utf-8", split=None) -> pd.DataFrame:
    return read_samples(path, encoding=encoding, filter_name=getattr(params, "filter", None))


def read_samples(path: Path, *, encoding: str = "utf-8", filter_name: str | None = None) -> pd.DataFrame:
    """The samples of one filter as a table with `_line` (the file's line numbers); see the module's docstring."""
    task = task_name(path)
    rows = [_row(record, path, number, task) for number, record in jsonl_records(path, encoding)]
    if not rows:
        raise DataError(f"{path}: no samples; write them with lm_eval --log_samples --output_path DIR.")
    frame = pd.DataFrame.from_records(rows)
    filters = list(dict.fromkeys(frame["filter"].astype(str)))
    chosen = filter_name if filter_name is not None else filters[0]
    if chosen not in filters:
        raise DataError(f"{path}: no filter {chosen!r}; the file's filters: {preview(filters)}; fix --filter.")
    judges = frame.pop("_judge").dropna()
    metrics = list(dict.fromkeys(m for names in frame.pop("_metrics") for m in names))
    summary = _per_filter(frame, filters, metrics)
    frame = frame[frame["filter"].astype(str) == chosen].reset_index(drop=True)
    duplicated = frame["example_id"].duplicated()
    if duplicated.any():
        line = int(frame["_line"][duplicated].iloc[0])
        raise DataError(f"{where(path, line, 'doc_id')}: doc_id {frame['example_id'][duplicated].iloc[0]!r} appears "
                        f"twice under filter {chosen!r}; one file holds one task's samples, each document once per "
                        "filter.")
    if len(judges):
        frame.attrs["judge"] = str(judges.iloc[0])
    frame.attrs["filters"] = summary
    frame.attrs["filter"] = chosen
    frame.attrs["reading_columns"] = [c for c in frame.columns if c.startswith("doc_") and _long(frame[c])]
    return frame


def task_name(path: Path) -> str | None:
    """The task of `samples_<task>_<time>.jsonl`, as lm-eval names its files."""
    found = re.match(r"samples_(.+)_\d{4}-\d{2}-\d{2}T[\d\-.]+$", path.stem)
    return found.group(1) if found else None


def _per_filter(frame: pd.DataFrame, filters: list[str], metrics: list[str]) -> list[dict]:
    """lm-eval's own table: per filter, each metric's mean over its documents."""
    out = []
    for name in filters:
        part = frame[frame["filter"].astype(str) == name]
        for metric in metrics:
            values = part[metric].to_numpy(dtype=np.float64)
            values = values[np.isfinite(values)]
            out.append({"task": str(part["task"].iloc[0]) if part["task"].notna().any() else None,
                        "filter": name, "metric": metric, "value": float(values.mean()) if values.size else None,
                        "n": int(values.size), "no_answer": int((part["filtered_output"] == NO_ANSWER).sum())})
    return out


def _row(record, path: Path, number: int, task: str | None) -> dict:
    if not isinstance(record, dict) or "doc_id" not in record or "filtered_resps" not in record:
        found = sorted(record)[:8] if isinstance(record, dict) else type(record).__name__
        raise DataError(f"{where(path, number)}: not an lm-eval sample (expected doc_id, doc, target, arguments, "
                        f"resps, filtered_resps; found {found}).")
    answer = _output(record.get("filtered_resps"), path, number)
    generation = _output(record.get("resps"), path, number, nested=True)
    target = _text(record.get("target"))
    row = {"example_id": _doc_id(record["doc_id"], path, number),
           "prompt": _prompt(record.get("arguments"), path, number), "output": generation,
           "filtered_output": answer, "reference": target, "task": task, "filter": record.get("filter"),
           "_line": number}
    metrics = [m for m in record.get("metrics") or [] if m in record]
    for name in metrics:
        row[name] = _number(record[name])
    row["_judge"] = metrics[0] if metrics else None
    row["_metrics"] = metrics
    row["judge_detail"] = _detail(row["filter"], answer, target)
    for key, value in (record.get("doc") or {}).items():
        if isinstance(value, (bool, int, float, str)):
            row[f"doc_{key}"] = value
    return row


def _doc_id(value, path: Path, number: int) -> str:
    """lm-eval's doc_id (an integer; a string from custom tasks); anything else is refused, never stringified."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where(path, number, 'doc_id')}: {json.dumps(value)[:60]} is not a document id (lm-eval "
                        "writes an integer); fix or remove that line.")
    return str(value)


def _detail(filter_name, answer: str, target: str | None) -> str:
    """Why the filter's answer may fail: none extracted (the answer's format), or the answer beside the target."""
    if answer.strip() == NO_ANSWER or not answer.strip():
        return f"{filter_name}: no answer extracted from the generation ({answer.strip() or 'empty'})"
    return f"{filter_name}: answer {answer.strip()[:40]!r}, target {str(target or '').strip()[:40]!r}"


def _long(values: pd.Series) -> bool:
    return bool(values.map(lambda v: isinstance(v, str) and len(v) > DOC_TEXT_LIMIT).any())


def _prompt(arguments, path: Path, number: int) -> str:
    if isinstance(arguments, dict) and arguments:  # lm-eval >= 0.4.3: {"gen_args_0": {"arg_0": prompt, ...}}
        first = arguments.get("gen_args_0") or next(iter(arguments.values()))
        value = first.get("arg_0") if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], (list, tuple)):
        value = arguments[0][0] if arguments[0] else None
    else:
        value = None
    if not isinstance(value, str):
        raise DataError(f"{where(path, number, 'arguments')}: no prompt (expected gen_args_0.arg_0 to be text).")
    return value


def _output(responses, path: Path, number: int, nested: bool = False) -> str:
    value = responses
    for _ in range(2 if nested else 1):
        if isinstance(value, list) and value:
            value = value[0]
    if not isinstance(value, str):
        column = "resps" if nested else "filtered_resps"
        raise DataError(f"{where(path, number, column)}: {json.dumps(responses)[:80]} is not generated text: the "
                        "samples of a loglikelihood task (multiple choice, perplexity) have none; analyze a "
                        "generate_until task's samples.")
    return value


def _text(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _number(value) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (int, float)):
        return float(value[0])
    return np.nan
